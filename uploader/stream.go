package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// errShort cancels a streamed part whose chunk ended shorter than the
// chunk size it was declared with: the object's last chunk, which is then
// uploaded whole, with its real length.
var errShort = errors.New("chunk ended short of the streamed part's length")

// errAbandoned ends the upload of a chunk that its writer gave up before
// it was full.
var errAbandoned = errors.New("chunk abandoned while filling")

// filling is a chunk whose part upload may start while it fills: the
// writer appends to its buffer and reports each new length with grow;
// the upload's body reads the buffer up to that length and waits for
// more. finish fixes the chunk's length; a chunk that ends short of the
// chunk size (the object's last) is uploaded whole instead, with its
// real length. The buffer stays the pool's until the part is
// acknowledged, so a retry replays it from memory. grow, finish and
// abandon are for the one goroutine that fills the chunk (a Sink's
// appending goroutine), which owns it.
type filling struct {
	obj   *Upload
	part  int32
	buf   []byte // capacity ChunkSize; buf[:n] written
	chunk *chunk

	mu      sync.Mutex
	cond    sync.Cond
	n       int
	final   bool
	err     error // errAbandoned
	started bool  // a streamed request was sent
	stop    context.CancelCauseFunc
	// owed: the part is settled (it failed) while the writer still
	// fills the chunk; the buffer goes back to the pool at finish or
	// abandon, once nothing writes to it.
	owed bool
}

// releaseLater says whether the chunk's buffer, whose part is settled,
// must wait for finish or abandon to go back to the pool: the writer
// has not handed the chunk back yet and may still append to it.
func (f *filling) releaseLater() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.final || f.err != nil {
		return false
	}
	f.owed = true
	return true
}

// handBack releases the buffer owed to the pool, if it is.
func (f *filling) handBack(owed bool) {
	if owed {
		f.obj.pool.release(f.buf[:0])
	}
}

// begin hands chunk buf (from Pool.acquire, empty) to the pool as part
// number n before it is filled. Over a store that streams parts
// (Pool.streams) the part's upload starts as soon as a worker is free,
// part 1 once it holds Config.streamAfter bytes (so an output smaller
// than that is still one PutObject), or at its first byte once the
// object is prepared. Ownership of buf passes to the pool; the caller
// keeps appending to it (never past its capacity) and calls grow, then
// finish or abandon exactly once.
func (o *Upload) begin(n int32, buf []byte) (*filling, error) {
	f := &filling{obj: o, part: n, buf: buf[:0]}
	f.cond.L = &f.mu
	o.mu.Lock()
	if err := o.takeLocked(n); err != nil {
		o.mu.Unlock()
		o.pool.release(buf)
		return nil, err
	}
	f.chunk = o.addChunkLocked(buf[:0])
	o.ready = append(o.ready, &part{obj: o, n: n, body: body{fill: f}, chunks: []*chunk{f.chunk}, queued: time.Now()})
	o.wg.Add(1)
	if err := o.queueUnlock(); err != nil {
		return nil, err
	}
	return f, nil
}

// grow says buf[:n] of the chunk now holds its bytes.
func (f *filling) grow(n int) {
	f.mu.Lock()
	f.n = n
	f.mu.Unlock()
	f.cond.Broadcast()
}

// finish fixes the chunk at its current length; last marks the object's
// final chunk. When no worker has taken the last chunk's part yet, the
// object's tail is re-cut (see Upload.lastLocked).
func (f *filling) finish(last bool) {
	f.mu.Lock()
	f.final = true
	f.obj.finishChunk(f, last)
	short := f.n < cap(f.buf)
	stop, owed := f.stop, f.owed
	f.mu.Unlock()
	if short && stop != nil {
		stop(errShort)
	}
	f.cond.Broadcast()
	f.handBack(owed)
}

// finishChunk records the bytes of f's chunk, now complete (under f.mu,
// before a worker can see it final). For the object's last chunk it
// settles whether the object is one PutObject and re-cuts the tail.
func (o *Upload) finishChunk(f *filling, last bool) {
	o.mu.Lock()
	// A full chunk's part may have fixed its length already (fixBody)
	// and be done, its buffer read by settle outside o.mu: write only
	// what changes.
	if len(f.chunk.buf) != f.n {
		f.chunk.buf = f.buf[:f.n]
	}
	if !last || !o.state.takesChunks() {
		o.mu.Unlock()
		return
	}
	// Part 1 never sent: the whole object is this chunk, one PutObject,
	// unless its multipart upload was asked for already.
	k := len(o.ready)
	o.lastLocked(f.part == 1 && !f.started, k > 0 && o.ready[k-1].body.fill == f)
	_ = o.queueUnlock() // a closed pool fails the object
}

// abandon ends the chunk's upload without completing it; the part fails
// with errAbandoned (the writer is going away anyway).
func (f *filling) abandon() {
	f.mu.Lock()
	f.err = errAbandoned
	stop, owed := f.stop, f.owed
	f.mu.Unlock()
	if stop != nil {
		stop(errAbandoned)
	}
	f.cond.Broadcast()
	f.handBack(owed)
}

// waitFor blocks until the chunk holds at least n bytes, is final or is
// abandoned, and says which: the length, final and abandoned.
func (f *filling) waitFor(ctx context.Context, n int) (int, bool, error) {
	stop := context.AfterFunc(ctx, f.cond.Broadcast)
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n < n && !f.final && f.err == nil && ctx.Err() == nil {
		f.cond.Wait()
	}
	if f.err != nil {
		return f.n, f.final, f.err
	}
	if err := ctx.Err(); err != nil {
		return f.n, f.final, context.Cause(ctx)
	}
	return f.n, f.final, nil
}

// start marks the chunk as streamed unless it is already final (then it
// is uploaded whole); stop cancels the streamed request.
func (f *filling) start(stop context.CancelCauseFunc) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.final || f.err != nil {
		return false
	}
	f.started, f.stop = true, stop
	return true
}

// reader reads the chunk from its first byte, waiting for bytes not yet
// written; it ends (io.EOF) at the chunk size, and fails when the chunk
// ends short, is abandoned or ctx is done.
func (f *filling) reader(ctx context.Context) io.Reader {
	return &fillReader{f: f, ctx: ctx}
}

type fillReader struct {
	f   *filling
	ctx context.Context
	off int
}

func (r *fillReader) Read(p []byte) (int, error) {
	f := r.f
	size := cap(f.buf)
	if r.off >= size {
		return 0, io.EOF
	}
	f.mu.Lock()
	if f.n == r.off && !f.final && f.err == nil && r.ctx.Err() == nil {
		// Wake on the request's end too: a cancelled request must not
		// leave the transport's writer waiting here.
		stop := context.AfterFunc(r.ctx, f.cond.Broadcast)
		for f.n == r.off && !f.final && f.err == nil && r.ctx.Err() == nil {
			f.cond.Wait()
		}
		stop()
	}
	n, final, err := f.n, f.final, f.err
	f.mu.Unlock()
	switch {
	case err != nil:
		return 0, err
	case r.off < n:
		c := copy(p, f.buf[r.off:n])
		r.off += c
		return c, nil
	case final:
		return 0, errShort
	default:
		return 0, context.Cause(r.ctx)
	}
}

// sendFilling sends a part whose chunk was handed over by begin: streamed
// while it fills when the pool streams parts, else (or when the chunk is
// complete already, or turns out short) whole, as any part is sent. Part
// 1 of an object still open waits for Config.streamAfter bytes, so that
// a small output stays one PutObject.
func (o *Upload) sendFilling(pt *part) error {
	f := pt.body.fill
	threshold := 1
	o.mu.Lock()
	if pt.n == 1 && o.state == stateOpen {
		threshold = int(o.pool.cfg.streamAfter)
	}
	o.mu.Unlock()
	if !o.pool.streams {
		threshold = cap(f.buf) + 1 // wait for the final length
	}
	if _, _, err := f.waitFor(o.ctx, threshold); err != nil {
		return fmt.Errorf("upload part %d of %s: %w", pt.n, o.key, err)
	}
	if o.pool.streams {
		ctx, stop := context.WithCancelCause(o.ctx)
		defer stop(nil)
		if f.start(stop) {
			err := o.send(ctx, pt)
			cause := context.Cause(ctx)
			switch {
			case err == nil:
				pt.streamed = true
				o.fixBody(pt, cap(f.buf))
				return nil
			case errors.Is(cause, errAbandoned):
				return fmt.Errorf("upload part %d of %s: %w", pt.n, o.key, cause)
			case !errors.Is(cause, errShort) && !errors.Is(err, errShort):
				return err
			}
			o.pool.resent.Add(1)
		}
	}
	// Whole: the chunk is final (or ended short of a streamed request).
	n, _, err := f.waitFor(o.ctx, cap(f.buf)+1)
	if err != nil {
		return fmt.Errorf("upload part %d of %s: %w", pt.n, o.key, err)
	}
	o.fixBody(pt, n)
	return o.send(o.ctx, pt)
}

// fixBody makes the first n bytes of pt's chunk, a begun chunk now
// complete, its body: from here on it is sent and settled like a chunk
// handed over whole.
func (o *Upload) fixBody(pt *part, n int) {
	buf := pt.body.fill.buf[:n]
	pt.body = body{segs: [][]byte{buf}}
	o.mu.Lock()
	pt.chunks[0].buf = buf
	o.mu.Unlock()
}
