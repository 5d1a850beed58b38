package uploader

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/store"
)

// Object is one object being written through the pool: the writer hands
// it bytes (Write) or sections of files on disk (WriteSection), then
// Finish or Abort, and the object alone decides how they are stored. Its
// bytes from memory fill the pool's chunk buffers, each a part (streamed
// while it fills when the pool streams parts), the object's last chunk
// one PutObject when it is its first. Its bytes from disk are cut into
// parts sized by the object (section.go), each read from disk by every
// request. The upload itself (completion, abort) is its Upload's, which
// the writer's owner finishes. Its methods are for one goroutine at a
// time (chunker.Object).
type Object struct {
	pool *Pool
	up   *Upload
	// stream: chunks upload while they fill (Upload.begin).
	stream bool

	cur     []byte   // the chunk being filled, from Pool.acquire
	filling *filling // cur's part when it streams
	part    int32    // parts handed over
	// disk is the part plan of an object written from disk; nil for one
	// written from memory.
	disk *diskParts
	// toMemory: bytes handed over from disk go to chunks all the same
	// (an object of no more than a chunk is one put, or one part).
	toMemory bool
	ended    bool

	// An object of NewObject: the pool it owns, and the size and CRC32C
	// of its bytes (sums); whether its Complete was asked for, and
	// succeeded.
	own                   *Pool
	sums                  bool
	size                  int64
	crc                   uint32
	hint                  int64 // ObjectOptions.SizeHint
	completing, completed bool
}

var _ chunker.Object = (*Object)(nil)

// newObject makes the writable object of upload up: its bytes come from
// disk when onDisk, about size bytes of them (0: unknown). release, if
// not nil, lets go of the files its sections are read from, once the
// upload is over.
func (s *Sink) newObject(up *Upload, size int64, onDisk bool, release func()) (*Object, error) {
	return newObject(s.pool, up, size, onDisk, release)
}

func newObject(p *Pool, up *Upload, size int64, onDisk bool, release func()) (*Object, error) {
	chunk := p.cfg.ChunkSize
	o := &Object{pool: p, up: up}
	if release != nil {
		up.ownFile(release)
	}
	if onDisk && size > chunk {
		d, err := planDisk(p, up, size)
		if err != nil {
			return nil, err
		}
		o.disk = d
		// Its sections will be a multipart upload however many they
		// are: created now, while the first part's bytes are merged, so
		// that the part leaves as soon as they are on disk.
		up.createEarly()
		return o, nil
	}
	o.toMemory = onDisk
	// An object known to stay under a chunk is not streamed: a part
	// streamed while its chunk fills is sent again whole when the chunk
	// ends short.
	o.stream = p.streams && !(size > 0 && size < chunk*3/4)
	if o.stream && size > chunk {
		// More than one chunk: the multipart upload is created now, so
		// that part 1 streams from its first byte (see Upload.prepare).
		up.prepare()
	}
	return o, nil
}

// Write appends p to the object's chunks: it copies p into the chunk
// being filled, hands each chunk to the pool once it is full and more
// bytes follow, and takes the next from the pool, blocking while
// Config.MaxBuffered buffers are held.
func (o *Object) Write(p []byte) error {
	if o.disk != nil {
		return fmt.Errorf("object %s: Write to an object written from disk", o.up.key)
	}
	if o.sums {
		o.size += int64(len(p))
		o.crc = store.UpdateCRC32C(o.crc, p)
	}
	chunk := int(o.pool.cfg.ChunkSize)
	for len(p) > 0 {
		if len(o.cur) == chunk {
			if err := o.emit(false); err != nil {
				return err
			}
		}
		if o.cur == nil {
			buf, err := o.pool.acquire(o.up.ctx)
			if err != nil {
				return err
			}
			if o.stream {
				f, err := o.up.begin(o.part+1, buf)
				if err != nil {
					return err // the pool has the buffer back
				}
				o.filling = f
			}
			o.cur = buf
		}
		n := min(len(p), chunk-len(o.cur))
		o.cur = append(o.cur, p[:n]...)
		p = p[n:]
		if o.filling != nil {
			o.filling.grow(len(o.cur))
		}
	}
	return nil
}

// emit hands the chunk being filled to the pool as the next part; last
// marks the object's final one.
func (o *Object) emit(last bool) error {
	o.part++
	if o.part > store.MaxParts {
		return fmt.Errorf("object %s: more than %d parts of %d bytes", o.up.key, store.MaxParts, o.pool.cfg.ChunkSize)
	}
	buf, f := o.cur, o.filling
	o.cur, o.filling = nil, nil
	if f != nil {
		f.finish(last)
		return nil
	}
	return o.up.submit(o.part, buf, last)
}

// WriteSection appends bytes on disk: a section of a part planned from
// the object's size, or, for an object of no more than a chunk, copied
// into its chunk.
func (o *Object) WriteSection(s chunker.Section) error {
	if o.disk == nil {
		if !o.toMemory {
			return fmt.Errorf("object %s: section handed to an object written from memory", o.up.key)
		}
		b, err := readSection(s)
		if err != nil {
			return err
		}
		return o.Write(b)
	}
	return o.disk.write(o, s)
}

// Finish hands over the object's last part.
func (o *Object) Finish() error {
	if o.ended {
		return fmt.Errorf("object %s: finished twice", o.up.key)
	}
	o.ended = true
	switch {
	case o.disk != nil:
		return o.disk.emit(o, true)
	case o.cur != nil:
		return o.emit(true)
	}
	return fmt.Errorf("object %s: finished with no bytes", o.up.key)
}

// Abort gives the chunk being filled back to the pool; one that streams
// is abandoned (its part fails, and with it the object).
func (o *Object) Abort() {
	o.ended = true
	if f := o.filling; f != nil {
		o.cur, o.filling = nil, nil
		f.abandon()
		return
	}
	if o.cur != nil {
		o.pool.release(o.cur)
		o.cur = nil
	}
}

// readSection reads s from its file, checked against its CRC32C.
func readSection(s chunker.Section) ([]byte, error) {
	sec, err := s.File.Section(s.Off, s.N)
	if err != nil {
		return nil, err
	}
	b := make([]byte, s.N)
	if _, err := io.ReadFull(sec, b); err != nil {
		return nil, fmt.Errorf("read %d bytes at %d of spill %s: %w", s.N, s.Off, s.File.Name(), err)
	}
	if got := store.CRC32C(b); got != s.CRC32C {
		return nil, extent{file: s.File, off: s.Off, n: s.N, crc: s.CRC32C, what: s.What}.changed(got)
	}
	return b, nil
}

// errEnded: a byte handed over after Finish or Abort.
var errEnded = errors.New("object ended")

// diskParts is the part plan and the current part of an object written
// from disk.
type diskParts struct {
	pool        *Pool
	planned     int   // parts planned
	first       int64 // the first part's size when it is planned apart; 0 if not
	least, most int64 // the smallest part but the last, the largest
	est         int64 // the object's size as first told
	size        int64 // the object's bytes so far
	start       int64 // the current part's first byte
	crc         uint32
	exts        []extent // the current part's bytes
	// cut is when the last part was handed over (the object's first
	// bytes before any), and mergeRate the bytes per second its bytes
	// were written at (0 before any).
	cut       time.Time
	mergeRate float64
}

// planDisk plans the parts of up, of about size bytes, from disk, with
// the other objects from disk the pool uploads now, and counts it among
// them until its upload ends.
func planDisk(p *Pool, up *Upload, size int64) (*diskParts, error) {
	parts, first, least, most, err := PlanFileParts(p.cfg, up.key, size, int(p.fromDisk.Load())+1)
	if err != nil {
		return nil, err
	}
	up.mu.Lock()
	up.fromDisk = true
	up.mu.Unlock()
	p.fromDisk.Add(1)
	return &diskParts{pool: p, planned: max(parts, 1), first: first, least: least, most: most, est: size, cut: time.Now()}, nil
}
