package uploader

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// openSpill opens a spill directory under the test's temp dir.
func openSpill(t *testing.T, limit int64) *spill.Dir {
	t.Helper()
	d, err := spill.Open(t.TempDir(), limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestPartSize: the parts partSize cuts one after another carry the bytes
// given, in the parts given, each 1 + r times the next, so that parts
// handed over as they are merged, each on a connection of its own
// sending r times as fast as the merge, all end together; with r 0 they
// are equal.
func TestPartSize(t *testing.T) {
	const left = 1 << 30
	for _, tc := range []struct {
		parts int
		r     float64
	}{{8, 0}, {8, 0.02}, {8, 0.25}, {8, 1}, {8, 4}, {1, 0.5}, {2, 0.1}, {64, 0.05}} {
		t.Run(fmt.Sprintf("%d parts, r %g", tc.parts, tc.r), func(t *testing.T) {
			var sizes []int64
			rest := int64(left)
			for k := tc.parts; k >= 1; k-- {
				s := partSize(rest, k, tc.r)
				if s <= 0 || s > rest {
					t.Fatalf("part %d of %d: %d bytes with %d left", len(sizes)+1, tc.parts, s, rest)
				}
				sizes = append(sizes, s)
				rest -= s
			}
			if rest != 0 {
				t.Fatalf("parts %v leave %d bytes", sizes, rest)
			}
			// In time units of the merge: part k is ready when its bytes
			// are merged and takes size / r to send.
			var merged int64
			var ends []float64
			for i, s := range sizes {
				merged += s
				if tc.r == 0 {
					if d := s - sizes[0]; d < -1 || d > 1 {
						t.Fatalf("with r 0, part %d is %d bytes, the first %d: want equal parts", i+1, s, sizes[0])
					}
					continue
				}
				ends = append(ends, float64(merged)+float64(s)/tc.r)
			}
			for i, e := range ends {
				if math.Abs(e-ends[0]) > 2/tc.r+2 {
					t.Fatalf("parts %v end at %v (merge time units): part %d does not end with the first", sizes, ends, i+1)
				}
			}
		})
	}
}

// flipByte inverts the byte at off of the file name.
func flipByte(t *testing.T, name string, off int64) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestPartReader: a part read from its extents gives their bytes, in
// order, to any number of readers reading side by side in pieces of any
// size, at any offset, and again; a changed byte of a checked extent
// fails every read of that extent's end, however the reads are cut, and
// never a read of other extents.
func TestPartReader(t *testing.T) {
	d := openSpill(t, 1<<30)
	f := d.Create()
	defer f.Remove()
	var whole []byte
	var exts []extent
	for i, n := range []int{3000, 70_000, 1, 250_000, 40} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*31 + j*7)
		}
		off, err := f.Append(b)
		if err != nil {
			t.Fatal(err)
		}
		whole = append(whole, b...)
		exts = append(exts, extent{file: f, off: off, n: int64(n), check: i%2 == 1, crc: store.CRC32C(b)})
	}
	read := func(r *partReader, step int, from int64) ([]byte, error) {
		var out []byte
		for off := from; off < r.size; off += int64(step) {
			b := make([]byte, min(int64(step), r.size-off))
			if _, err := r.ReadAt(b, off); err != nil {
				return out, err
			}
			out = append(out, b...)
		}
		return out, nil
	}
	r, err := newPartReader(exts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, step := range []int{1 << 20, 4096, 333, 65_536} {
		wg.Go(func() {
			got, err := read(r, step, 0)
			if err != nil || !bytes.Equal(got, whole) {
				t.Errorf("reads of %d bytes: %d bytes back (%v), want the part's %d", step, len(got), err, len(whole))
			}
		})
	}
	wg.Wait()
	if got, err := read(r, 1000, 200_000); err != nil || !bytes.Equal(got, whole[200_000:]) {
		t.Fatalf("a read from offset 200000: %v", err)
	}

	// A byte changed in the fourth extent (checked): a reader that starts
	// past it, or reads in any pieces, fails at that extent's end.
	flipByte(t, f.Name(), exts[3].off+1000)
	for _, tc := range []struct {
		step int
		from int64
	}{{1 << 20, 0}, {777, 0}, {4096, exts[3].off + 5000}} {
		r, err := newPartReader(exts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := read(r, tc.step, tc.from)
		if err == nil || !strings.Contains(err.Error(), "the spill file changed on disk") || !strings.Contains(err.Error(), f.Name()) {
			t.Fatalf("reads of %d from %d over a changed byte: %v", tc.step, tc.from, err)
		}
		if end := exts[3].off + exts[3].n; tc.from+int64(len(got)) > end {
			t.Fatalf("reads of %d from %d: %d bytes read past the changed extent's end, %d", tc.step, tc.from, len(got), end)
		}
		if _, err := r.ReadAt(make([]byte, 10), exts[4].off); err != nil {
			t.Fatalf("a read of the next extent: %v", err)
		}
		if _, err := r.ReadAt(make([]byte, 10), exts[3].off+exts[3].n-10); err == nil {
			t.Fatalf("a read of the changed extent's end after it failed: no error")
		}
	}
}
