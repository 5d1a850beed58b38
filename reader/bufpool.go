package reader

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// spanBufs recycles the buffers of ranged GETs whose frames all decoded
// into memory of their own (frame.Copies): a reader streaming a stage
// otherwise allocates, and the runtime zeroes, a fresh buffer of up to
// read_range_bytes for every GET, only for the collector to free it a
// moment later. Buffers come in power-of-two classes from 64 KiB, so a
// span takes at most twice its length; a sync.Pool per class lets the
// collector free what no reader takes again.
var spanBufs bufPool

const (
	minBufClass = 16 // 64 KiB
	maxBufClass = 30 // 1 GiB: larger spans are allocated and left to the collector
)

type bufPool struct {
	classes [maxBufClass + 1]sync.Pool
}

// class is the smallest power of two that holds n bytes, at least
// minBufClass; past maxBufClass it is -1.
func bufClass(n int64) int {
	if n <= 1<<minBufClass {
		return minBufClass
	}
	c := bits.Len64(uint64(n - 1))
	if c > maxBufClass {
		return -1
	}
	return c
}

// get returns a buffer of length n. Its bytes are not zeroed: the
// caller reads back only what it wrote.
func (p *bufPool) get(n int64) []byte {
	c := bufClass(n)
	if c < 0 {
		return make([]byte, n)
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

// put takes back a buffer from get; nothing may refer to it afterwards.
func (p *bufPool) put(b []byte) {
	c := bufClass(int64(cap(b)))
	if c < 0 || cap(b) != 1<<c {
		return
	}
	b = b[:0]
	p.classes[c].Put(&b)
}

// spanBuf is a buffer from spanBufs that a group's lazily decoded frames
// share: it goes back once each of its whole frames has been decoded,
// unless one was uncompressed (its batches point into it). A reader
// released before then leaves it to the collector.
type spanBuf struct {
	b     []byte
	left  atomic.Int32 // whole frames not yet decoded
	alias atomic.Bool  // a decoded frame's batches point into b
}

// hold sets the number of whole frames in the buffer; with none, nothing
// refers to it and it goes back at once.
func (sb *spanBuf) hold(frames int32) {
	if sb == nil {
		return
	}
	if frames == 0 {
		spanBufs.put(sb.b)
		return
	}
	sb.left.Store(frames)
}

// decoded records that one of the buffer's frames was decoded; copied:
// its batches do not point into the buffer.
func (sb *spanBuf) decoded(copied bool) {
	if sb == nil {
		return
	}
	if !copied {
		sb.alias.Store(true)
	}
	if sb.left.Add(-1) == 0 && !sb.alias.Load() {
		spanBufs.put(sb.b)
	}
}
