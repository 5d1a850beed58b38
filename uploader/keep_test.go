package uploader

import (
	"context"
	"sync"
	"testing"
)

// budget is a Keeper of max bytes.
type budget struct {
	mu                 sync.Mutex
	max, used, decline int64
}

func (b *budget) Reserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		b.decline += n
		return false
	}
	b.used += n
	return true
}

func (b *budget) Unreserve(n int64, declined bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if declined {
		b.decline += n
	}
}

// TestKeepChunks: an object keeping its chunks hands over the uploaded
// buffers in part order, each reserved from the Keeper, and returns their
// budget to the pool; one that does not fit keeps nothing and gives back
// what it reserved; an aborted one gives back everything.
func TestKeepChunks(t *testing.T) {
	t.Run("kept in part order", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		k := &budget{max: 1 << 30}
		o := p.newUpload(context.Background(), "k", nil)
		o.keepIn(k)
		write(t, p, o, 5) // the pool holds 4 buffers: keeping must return their budget
		if _, err := o.Finish(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !o.Keeping() {
			t.Fatal("stopped keeping with room to spare")
		}
		chunks, reserved, ok := o.TakeKept()
		if !ok || len(chunks) != 5 {
			t.Fatalf("TakeKept: %d chunks, ok %v", len(chunks), ok)
		}
		var want int64
		for i, c := range chunks {
			size := testChunk
			if i == 4 {
				size = testChunk / 2 // not below half a buffer: kept as it is
			}
			if len(c) != size {
				t.Fatalf("chunk %d: %d bytes, want %d", i+1, len(c), size)
			}
			want += int64(cap(c))
		}
		if reserved != want || k.used != want {
			t.Fatalf("reserved %d, keeper used %d, want the buffers' capacity %d", reserved, k.used, want)
		}
		if s := p.Stats(); s.Buffered != 0 {
			t.Fatalf("pool still counts %d buffers", s.Buffered)
		}
	})
	t.Run("does not fit", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		k := &budget{max: 2 * testChunk}
		o := p.newUpload(context.Background(), "k", nil)
		o.keepIn(k)
		write(t, p, o, 4)
		if _, err := o.Finish(context.Background()); err != nil {
			t.Fatalf("a keeper that is full failed the upload: %v", err)
		}
		if o.Keeping() {
			t.Fatal("still keeping past the budget")
		}
		if _, _, ok := o.TakeKept(); ok || k.used != 0 || k.decline == 0 {
			t.Fatalf("TakeKept ok %v, keeper used %d, declined %d", ok, k.used, k.decline)
		}
	})
	t.Run("abort gives back", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		k := &budget{max: 1 << 30}
		o := p.newUpload(context.Background(), "k", nil)
		o.keepIn(k)
		write(t, p, o, 3)
		if err := o.Abort(); err != nil {
			t.Fatal(err)
		}
		if k.used != 0 {
			t.Fatalf("keeper still holds %d bytes after Abort", k.used)
		}
	})
}
