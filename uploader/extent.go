package uploader

import (
	"cmp"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// extent is bytes of a part in a spill file. A checked one (bytes
// written long before, a kept frame's) is checked against its CRC32C as
// a request reads it.
type extent struct {
	file   *spill.File
	off, n int64
	check  bool
	crc    uint32
	what   string // names the bytes in an error; "": "bytes"
}

// changed is the error of e's bytes read with CRC32C got.
func (e extent) changed(got uint32) error {
	what := cmp.Or(e.what, "bytes")
	return changedError{fmt.Sprintf("spill %s: %s at offset %d (%d bytes) has CRC32C %08x, written as %08x: the spill file changed on disk",
		e.file.Name(), what, e.off, e.n, got, e.crc)}
}

// partReader reads a part of an object written from disk from its
// extents, for any number of requests, side by side or one after
// another, each from disk. The bytes of a kept frame copied in place are
// checked against the CRC32C they were handed over with: read in order
// by whichever request gets there first, and an extent whose bytes
// changed on disk fails every request that reads its end, so that no
// request can store it.
type partReader struct {
	exts []*partExtent
	size int64
}

// partExtent is an extent of a part and, for a checked one, how far its
// bytes have been checked.
type partExtent struct {
	extent
	at  int64 // its first byte in the part
	sec *io.SectionReader

	mu      sync.Mutex
	checked int64 // its first checked bytes
	sum     uint32
	bad     error
}

func newPartReader(exts []extent) (*partReader, error) {
	r := &partReader{exts: make([]*partExtent, len(exts))}
	for i, e := range exts {
		sec, err := e.file.Section(e.off, e.n)
		if err != nil {
			return nil, err
		}
		r.exts[i] = &partExtent{extent: e, at: r.size, sec: sec}
		r.size += e.n
	}
	return r, nil
}

// ReadAt implements io.ReaderAt.
func (r *partReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d of a part of %d bytes", off, r.size)
	}
	i := sort.Search(len(r.exts), func(i int) bool { return r.exts[i].at+r.exts[i].n > off })
	n := 0
	for ; n < len(p) && i < len(r.exts); i++ {
		e := r.exts[i]
		rel := off + int64(n) - e.at
		want := min(int64(len(p)-n), e.n-rel)
		b := p[n : n+int(want)]
		if err := e.read(b, rel); err != nil {
			return n, err
		}
		n += len(b)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// read reads len(b) bytes at rel of the extent, and checks them.
func (e *partExtent) read(b []byte, rel int64) error {
	if got, err := e.sec.ReadAt(b, rel); got < len(b) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read %d bytes at %d of spill %s: %w", len(b), e.off+rel, e.file.Name(), err)
	}
	if !e.check {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bad != nil {
		return e.bad
	}
	if rel > e.checked {
		// A read past the bytes checked so far: the ones between are
		// read (again) first, so that every byte is checked in order.
		gap := make([]byte, min(rel-e.checked, 1<<20))
		for e.checked < rel {
			g := gap[:min(int64(len(gap)), rel-e.checked)]
			if _, err := e.sec.ReadAt(g, e.checked); err != nil {
				return fmt.Errorf("read %d bytes at %d of spill %s: %w", len(g), e.off+e.checked, e.file.Name(), err)
			}
			e.sum = store.UpdateCRC32C(e.sum, g)
			e.checked += int64(len(g))
		}
	}
	if end := rel + int64(len(b)); end > e.checked {
		e.sum = store.UpdateCRC32C(e.sum, b[e.checked-rel:])
		e.checked = end
		if end == e.n && e.sum != e.crc {
			e.bad = e.changed(e.sum)
			return e.bad
		}
	}
	return nil
}

// changedError is a checked extent's bytes changed on disk: the request
// reading it fails for good (store.ErrBodyChanged), as every later one
// would.
type changedError struct{ msg string }

func (e changedError) Error() string { return e.msg }

func (e changedError) Is(target error) bool { return target == store.ErrBodyChanged }
