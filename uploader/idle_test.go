package uploader

import (
	"context"
	"testing"
)

// While any buffer is held, released ones are kept for the next acquire;
// once none is, the pool keeps no idle buffers alive.
func TestPoolLetsGoOfIdleBuffers(t *testing.T) {
	p := newTestPool(newScripted())
	defer p.Close()
	ctx := context.Background()
	a, err := p.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.release(a)
	if n := len(p.free); n != 1 {
		t.Fatalf("with a buffer still held, %d free buffers kept, want 1", n)
	}
	c, err := p.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if &c[:1][0] != &a[:1][0] {
		t.Fatal("a released buffer was not reused while another was held")
	}
	p.release(c)
	p.release(b)
	if n := len(p.free); n != 0 {
		t.Fatalf("with no buffer held, %d free buffers kept (%d bytes), want none", n, int64(n)*p.cfg.ChunkSize)
	}
	if st := p.Stats(); st.Buffered != 0 {
		t.Fatalf("Buffered = %d after every buffer was released", st.Buffered)
	}
}

// An open upload keeps the free buffers through a moment with none held
// (a writer between two runs); the upload's end lets them go.
func TestPoolKeepsBuffersWhileAnUploadIsOpen(t *testing.T) {
	p := newTestPool(newScripted())
	defer p.Close()
	ctx := context.Background()
	o := p.newUpload(ctx, "k", nil)
	a, err := p.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.release(a)
	if n := len(p.free); n != 1 {
		t.Fatalf("with an upload open, %d free buffers kept, want 1", n)
	}
	if err := o.Abort(); err != nil {
		t.Fatal(err)
	}
	if n := len(p.free); n != 0 {
		t.Fatalf("after the only upload ended, %d free buffers kept, want none", n)
	}
	if err := o.Abort(); err != nil { // a second end counts nothing
		t.Fatal(err)
	}
	if n := p.open.Load(); n != 0 {
		t.Fatalf("%d uploads counted open after one was aborted twice", n)
	}
}
