package chunker

import (
	"bytes"
	"testing"
)

// The frame buffer pool hands back what was put, emptied, keeps at most
// framePoolSize buffers and none past framePoolMax bytes, and survives a
// collection (a sync.Pool would not).
func TestFramePool(t *testing.T) {
	p := &framePool{free: make(chan *bytes.Buffer, framePoolSize)}
	b := p.Get()
	b.Grow(1 << 20)
	b.WriteString("frame")
	p.Put(b)
	got := p.Get()
	if got != b || got.Len() != 0 || got.Cap() < 1<<20 {
		t.Fatalf("got a buffer of %d bytes, capacity %d (same: %v); want the one put, emptied, its capacity kept", got.Len(), got.Cap(), got == b)
	}
	big := new(bytes.Buffer)
	big.Grow(framePoolMax + 1)
	p.Put(big)
	if n := len(p.free); n != 0 {
		t.Fatalf("a buffer past %d bytes was kept (%d waiting)", framePoolMax, n)
	}
	for range framePoolSize + 3 {
		p.Put(new(bytes.Buffer))
	}
	if n := len(p.free); n != framePoolSize {
		t.Fatalf("%d buffers kept, want at most %d", n, framePoolSize)
	}
}
