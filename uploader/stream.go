package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// errShort cancels a streamed part whose chunk ended shorter than the
// chunk size it was declared with: the object's last chunk, which is then
// uploaded whole, with its real length.
var errShort = errors.New("chunk ended short of the streamed part's length")

// ErrAbandoned ends the upload of a chunk that its writer gave up before
// it was full.
var ErrAbandoned = errors.New("chunk abandoned while filling")

// Filling is a chunk whose part upload may start while it fills: the
// writer appends to its buffer and reports each new length with Grow;
// the upload's body reads the buffer up to that length and waits for
// more. Finish fixes the chunk's length; a chunk that ends short of the
// chunk size (the object's last) is uploaded whole instead, with its
// real length. The buffer stays the pool's until the part is
// acknowledged, so a retry replays it from memory. Grow, Finish and
// Abandon are for the one goroutine that fills the chunk.
type Filling struct {
	obj   *Upload
	part  int32
	buf   []byte // capacity ChunkSize; buf[:n] written
	chunk *chunk

	mu      sync.Mutex
	cond    sync.Cond
	n       int
	final   bool
	last    bool
	err     error // ErrAbandoned
	started bool  // a streamed request was sent
	stop    context.CancelCauseFunc
}

// Begin hands chunk buf (from Pool.Acquire, empty) to the pool as part
// number n before it is filled. Over a store that streams parts
// (Pool.Streams) the part's upload starts as soon as a worker is free,
// part 1 once it holds Pool.StreamAfter bytes (so an output smaller than
// that is still one PutObject), or at its first byte once the object is
// prepared (Prepare). Ownership of buf passes to the pool; the
// caller keeps appending to it (never past its capacity) and calls Grow,
// then Finish or Abandon exactly once.
func (o *Upload) Begin(n int32, buf []byte) (*Filling, error) {
	f := &Filling{obj: o, part: n, buf: buf[:0]}
	f.cond.L = &f.mu
	o.mu.Lock()
	if o.err != nil {
		err := o.err
		o.mu.Unlock()
		o.pool.Release(buf)
		return nil, err
	}
	f.chunk = o.addChunkLocked(buf[:0])
	o.ready = append(o.ready, &job{obj: o, part: n, buf: buf, fill: f, chunks: []*chunk{f.chunk}, queued: time.Now()})
	o.wg.Add(1)
	if err := o.queueUnlock(); err != nil {
		return nil, err
	}
	return f, nil
}

// Grow says buf[:n] of the chunk now holds its bytes.
func (f *Filling) Grow(n int) {
	f.mu.Lock()
	f.n = n
	f.mu.Unlock()
	f.cond.Broadcast()
}

// Finish fixes the chunk at its current length; last marks the object's
// final chunk. When no worker has taken the last chunk's part yet, the
// object's tail is re-cut (see Submit).
func (f *Filling) Finish(last bool) {
	f.mu.Lock()
	f.final, f.last = true, last
	f.obj.finishChunk(f, last)
	short := f.n < len(f.buf[:cap(f.buf)])
	stop := f.stop
	f.mu.Unlock()
	if short && stop != nil {
		stop(errShort)
	}
	f.cond.Broadcast()
}

// finishChunk records the bytes of f's chunk, now complete (under f.mu,
// before a worker can see it final). For the object's last chunk it
// settles whether the object is one PutObject and re-cuts the tail.
func (o *Upload) finishChunk(f *Filling, last bool) {
	o.mu.Lock()
	// A full chunk's part may have fixed its length already (fixChunk)
	// and be done, its buffer read by settle outside o.mu: write only
	// what changes.
	if len(f.chunk.buf) != f.n {
		f.chunk.buf = f.buf[:f.n]
	}
	if !last {
		o.mu.Unlock()
		return
	}
	if f.part == 1 && !f.started {
		// Never sent: the whole object is this chunk, one PutObject,
		// unless Prepare created its multipart upload already.
		o.single = !o.prepared
	}
	if k := len(o.ready); k > 0 && o.ready[k-1].fill == f {
		o.recutLocked()
	}
	_ = o.queueUnlock() // a closed pool fails the object
}

// Abandon ends the chunk's upload without completing it; the part fails
// with ErrAbandoned (the writer is going away anyway).
func (f *Filling) Abandon() {
	f.mu.Lock()
	f.err = ErrAbandoned
	stop := f.stop
	f.mu.Unlock()
	if stop != nil {
		stop(ErrAbandoned)
	}
	f.cond.Broadcast()
}

// waitFor blocks until the chunk holds at least n bytes, is final or is
// abandoned, and says which: the length, final and abandoned.
func (f *Filling) waitFor(ctx context.Context, n int) (int, bool, error) {
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
func (f *Filling) start(stop context.CancelCauseFunc) bool {
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
func (f *Filling) reader(ctx context.Context) io.Reader {
	return &fillReader{f: f, ctx: ctx}
}

type fillReader struct {
	f   *Filling
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

// uploadFilling uploads a chunk handed over by Begin: streamed while it
// fills when the store streams parts, else (or when the chunk is already
// complete, or turns out short) whole, the way Submit's chunks go.
func (o *Upload) uploadFilling(j *job) error {
	f := j.fill
	ps, streams := store.As[store.PartStreamer](o.pool.st)
	streams = streams && o.pool.streams
	threshold := 1
	if j.part == 1 && !o.isPrepared() {
		threshold = int(o.pool.StreamAfter())
	}
	if !streams {
		threshold = cap(f.buf) + 1 // wait for the final length
	}
	if _, _, err := f.waitFor(o.ctx, threshold); err != nil {
		return fmt.Errorf("upload part %d of %s: %w", j.part, o.key, err)
	}
	if streams {
		streamed, err := o.stream(ps, j)
		if streamed || err != nil && !errors.Is(err, errShort) {
			return err
		}
		if err != nil {
			o.pool.resent.Add(1)
		}
	}
	// Whole: the chunk is final (or ended short of a streamed request).
	n, _, err := f.waitFor(o.ctx, cap(f.buf)+1)
	if err != nil {
		return fmt.Errorf("upload part %d of %s: %w", j.part, o.key, err)
	}
	f.mu.Lock()
	j.last = f.last
	f.mu.Unlock()
	o.fixChunk(j, n)
	return o.upload(j)
}

// stream sends the part while its chunk fills. It reports whether the
// part was streamed to the end (err is then the outcome); errShort, or
// false with a nil error, leaves the part to the whole-chunk path.
func (o *Upload) stream(ps store.PartStreamer, j *job) (bool, error) {
	f := j.fill
	ctx, stop := context.WithCancelCause(o.ctx)
	defer stop(nil)
	if !f.start(stop) {
		return false, nil // complete already: no reason to stream
	}
	id, err := o.ensureUpload()
	if err != nil {
		return true, err
	}
	size := int64(cap(f.buf))
	// Hedged like a whole part: a streamed request still running when the
	// hedge is due is raced by the same part sent whole once its chunk is
	// complete. Both carry the same bytes, so either answer is right.
	var (
		mu    sync.Mutex
		etag  string
		crc   uint32
		calls atomic.Int32
	)
	err = o.pool.hedged(ctx, func(ctx context.Context) error {
		var e string
		var c uint32
		var err error
		if calls.Add(1) == 1 {
			e, c, err = ps.UploadPartStream(ctx, o.key, id, j.part, size, func() io.Reader { return f.reader(ctx) })
		} else {
			var n int
			if n, _, err = f.waitFor(ctx, int(size)); err == nil && int64(n) < size {
				err = errShort
			}
			if err != nil {
				return err
			}
			c = store.CRC32C(f.buf[:size])
			e, err = o.pool.st.UploadPart(ctx, o.key, id, j.part, f.buf[:size], &c)
		}
		if err == nil {
			mu.Lock()
			etag, crc = e, c
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errShort) || errors.Is(cause, ErrAbandoned) {
			if errors.Is(cause, errShort) {
				return false, errShort
			}
			return true, fmt.Errorf("upload part %d of %s: %w", j.part, o.key, cause)
		}
		if errors.Is(err, errShort) {
			return false, errShort
		}
		return true, fmt.Errorf("upload part %d of %s (streamed, %d bytes): %w", j.part, o.key, size, err)
	}
	if want := store.CRC32C(f.buf[:size]); want != crc {
		return true, fmt.Errorf("upload part %d of %s (streamed, %d bytes): acknowledged CRC32C %08x, chunk has %08x", j.part, o.key, size, crc, want)
	}
	f.mu.Lock()
	j.last = f.last
	f.mu.Unlock()
	o.fixChunk(j, int(size))
	j.streamed = true
	var sum *uint32
	if o.pool.cfg.Checksum {
		sum = &crc
	}
	o.mu.Lock()
	o.parts = append(o.parts, store.Part{Number: j.part, ETag: etag, CRC32C: sum, Size: size})
	o.size += size
	o.mu.Unlock()
	return true, nil
}
