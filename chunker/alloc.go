package chunker

import (
	"math/bits"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// reuseAllocator is one encoder's allocator for the buffers that live
// only while a frame is encoded (the concatenated columns, the compressed
// bodies): buffers freed by one frame are handed to the next instead of
// being allocated, zeroed and collected again, since these buffers are
// most of what encoding allocates and each frame needs the same sizes
// as the last (BenchmarkWrite's allocated bytes per op show the effect).
// A reused buffer is not cleared here: arrow zeroes what it needs
// itself (padding, resized regions), and frame.Concat writes every byte
// of the buffers it asks for. Every buffer goes back to the parent allocator, with the size it was
// allocated with, by the time release has run and arrow has freed what
// it holds. Not safe for concurrent use: one per encoder goroutine.
type reuseAllocator struct {
	parent memory.Allocator
	free   [][]byte         // parent allocations ready for reuse
	out    map[*byte][]byte // handed out: first byte -> parent allocation
	done   bool
}

// A frame of 1 MiB concatenated from small batches has column buffers
// of a few KiB to a few hundred KiB (a 6000-row frame of lineitem: 6 KiB
// for a one-character string's bytes, 47 KiB for an int64 column), each
// allocated again for every frame unless kept here, and then its
// compressed bodies, of the same sizes; all of them are live at once.
const (
	reuseMin  = 4 << 10 // smaller buffers are not worth keeping
	reuseKeep = 128     // a frame has 16 columns x 2-3 buffers, and as many compressed
)

// reuseClass rounds a request for a new buffer up to one of eight sizes
// per power of two, so that the next frame's slightly larger column still
// fits the buffer this one frees (rows per frame vary by a few percent).
func reuseClass(size int) int {
	step := 1 << (bits.Len(uint(size)) - 4) // size/16 < step <= size/8
	return (size + step - 1) / step * step
}

func (a *reuseAllocator) Allocate(size int) []byte {
	if size < reuseMin || a.done {
		return a.parent.Allocate(size)
	}
	// The smallest kept buffer that fits, so big ones stay for big requests.
	best := -1
	for i, b := range a.free {
		if len(b) >= size && (best < 0 || len(b) < len(a.free[best])) {
			best = i
		}
	}
	var orig []byte
	if best >= 0 {
		orig = a.free[best]
		a.free[best] = a.free[len(a.free)-1]
		a.free = a.free[:len(a.free)-1]
	} else {
		orig = a.parent.Allocate(reuseClass(size))
	}
	if a.out == nil {
		a.out = map[*byte][]byte{}
	}
	a.out[unsafe.SliceData(orig)] = orig
	return orig[:size]
}

func (a *reuseAllocator) Reallocate(size int, b []byte) []byte {
	if orig, ok := a.out[unsafe.SliceData(b)]; ok && size <= len(orig) {
		return orig[:size]
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

func (a *reuseAllocator) Free(b []byte) {
	p := unsafe.SliceData(b)
	orig, ok := a.out[p]
	if !ok {
		a.parent.Free(b)
		return
	}
	delete(a.out, p)
	if a.done || len(a.free) >= reuseKeep {
		a.parent.Free(orig)
		return
	}
	a.free = append(a.free, orig)
}

// release returns the kept buffers to the parent; buffers still handed
// out go back to it when they are freed.
func (a *reuseAllocator) release() {
	a.done = true
	for _, b := range a.free {
		a.parent.Free(b)
	}
	a.free = nil
}
