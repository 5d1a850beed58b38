package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// ObjectOptions size an Object written outside a writer's pool (a seal's
// index, a combined object).
type ObjectOptions struct {
	// PartBytes is the size of every part but the last (at least
	// store.MinPartSize for a store that enforces it), and of each
	// buffer the object's bytes fill.
	PartBytes int64
	// Inflight is how many parts may upload at once (default 1). The
	// object holds at most Inflight buffers of PartBytes; bytes of
	// WriteFrom and WriteFile take none.
	Inflight int
	// SizeHint, when known, is the object's size: no buffer is made
	// larger than it. An object written by WriteFrom or WriteFile holds
	// exactly this many bytes: they may come in several calls, and a
	// call past it, or a Complete short of it, fails.
	SizeHint int64
}

// NewObject starts the object at key, uploaded by a pool of its own
// (opt.Inflight connections, opt.Inflight buffers): the same parts,
// checksums, streaming and retries as a writer's objects, except that
// its first part streams only once full, so that an object of at most
// PartBytes is one put on every store (a seal's index: one request, not
// three, and one round trip). ctx bounds every request. Whatever
// happens, the caller ends it with Complete, then Discard unless the
// object is to stay.
func NewObject(ctx context.Context, st Store, key string, opt ObjectOptions) *Object {
	inflight := max(opt.Inflight, 1)
	part := opt.PartBytes
	if opt.SizeHint > 0 {
		part = min(part, max(opt.SizeHint, 1))
	}
	p := New(st, Config{ChunkSize: part, Concurrency: inflight, MaxBuffered: inflight, Checksum: true,
		MinPartSize: min(store.MinPartSize, part), CleanupTimeout: time.Minute, streamAfter: part}, nil)
	o, _ := newObject(p, p.newUpload(ctx, key, nil), opt.SizeHint, false, nil)
	o.own, o.sums, o.hint = p, true, opt.SizeHint
	return o
}

// WriteFrom writes b without copying it: every part is a slice of b,
// so b must stay unchanged until Complete returns (and Discard, after a
// failure). An object of at most PartBytes is one put. Without
// ObjectOptions.SizeHint, b is the whole object. With it, the object may
// come in several calls, in order, as its bytes become ready (a combined
// object while its GETs still run, so that its upload runs beside them):
// each call hands over whole parts of PartBytes but the one that ends
// the object at SizeHint bytes. Parts handed over this way are sent as
// they are, never re-cut, so the object's parts are the same however
// its bytes arrive.
func (o *Object) WriteFrom(b []byte) error {
	end, err := o.next(int64(len(b)), "WriteFrom")
	if err != nil {
		return err
	}
	o.crc = store.UpdateCRC32C(o.crc, b)
	o.size += int64(len(b))
	chunk := o.pool.cfg.ChunkSize
	for {
		n := min(int64(len(b)), chunk)
		if n == 0 && !end {
			return nil
		}
		o.part++
		last := end && n == int64(len(b))
		if err := o.up.submitChunk(o.part, b[:n:n], last, true); err != nil {
			return err
		}
		if last {
			o.ended = true
			return nil
		}
		b = b[n:]
	}
}

// next checks that n more bytes may be handed over by verb (WriteFrom,
// WriteFile) and says whether they end the object: see WriteFrom.
func (o *Object) next(n int64, verb string) (end bool, err error) {
	hint, chunk := o.hint, o.pool.cfg.ChunkSize
	switch {
	case o.ended:
		return false, fmt.Errorf("object %s: %s after the object ended, after %d bytes", o.up.key, verb, o.size)
	case o.cur != nil || o.disk != nil:
		return false, fmt.Errorf("object %s: %s after bytes were written by Write or WriteSection", o.up.key, verb)
	case hint <= 0 && o.size > 0:
		return false, fmt.Errorf("object %s: %s after %d bytes were written to an object of no size hint", o.up.key, verb, o.size)
	case hint > 0 && o.size+n > hint:
		return false, fmt.Errorf("object %s: %s of %d bytes at %d passes the object's %d bytes (its size hint)", o.up.key, verb, n, o.size, hint)
	}
	end = hint <= 0 || o.size+n == hint
	if !end && n%chunk != 0 {
		return false, fmt.Errorf("object %s: %s of %d bytes at %d, before the object's end at %d: not whole parts of %d bytes", o.up.key, verb, n, o.size, hint, chunk)
	}
	return end, nil
}

// WriteFile writes the object's next size bytes from r, at the object's
// offset Size() in r, without holding them: parts of PartBytes (the last
// shorter), each a section of r that every request reads again. Each
// part's bytes are read once first, for its and the object's CRC32C, and
// the part goes before the next is read; they must stay unchanged until
// Complete returns. As for WriteFrom, an object of a size hint may come
// in several calls, in order.
func (o *Object) WriteFile(r io.ReaderAt, size int64) error {
	end, err := o.next(size, "WriteFile")
	if err != nil {
		return err
	}
	chunk := o.pool.cfg.ChunkSize
	stop := o.size + size
	buf := make([]byte, min(size, 1<<20))
	for off := o.size; off < stop; off += chunk {
		n := min(chunk, stop-off)
		sum := uint32(0)
		for at := off; at < off+n; {
			b := buf[:min(int64(len(buf)), off+n-at)]
			if _, err := r.ReadAt(b, at); err != nil {
				return fmt.Errorf("object %s: read %d bytes at %d of its file: %w", o.up.key, len(b), at, err)
			}
			sum = store.UpdateCRC32C(sum, b)
			o.crc = store.UpdateCRC32C(o.crc, b)
			at += int64(len(b))
		}
		o.size += n
		o.part++
		last := end && off+n == stop
		if err := o.up.submitSection(o.part, io.NewSectionReader(r, off, n), sum, last); err != nil {
			return err
		}
	}
	if end {
		o.ended = true
	}
	return nil
}

// Size is the bytes written so far, and CRC32C their checksum (kept for
// an object of NewObject only).
func (o *Object) Size() int64 { return o.size }

// CRC32C is the CRC32C of the bytes written so far (see Size).
func (o *Object) CRC32C() uint32 { return o.crc }

// Complete writes what is left and completes the object: one put when
// it never filled a part, else the last part and the Complete. ctx
// bounds the Complete. The object's own pool stops.
func (o *Object) Complete(ctx context.Context) (Result, error) {
	if !o.ended && o.hint > 0 && o.size > 0 && o.cur == nil && o.disk == nil {
		return Result{}, fmt.Errorf("object %s: completed at %d bytes, short of its %d (its size hint)", o.up.key, o.size, o.hint)
	}
	if !o.ended {
		if err := o.Finish(); err != nil {
			return Result{}, err
		}
	}
	o.completing = true
	res, err := o.up.Finish(ctx)
	if err == nil {
		o.completed = true
	}
	o.closePool()
	return res, err
}

// Discard undoes the object once no part is in flight: it aborts an
// unfinished upload and, given del, deletes the object if it was (or may
// have been) completed, within a minute, on a context detached from the
// caller's. After a Complete that failed, the upload is aborted already.
func (o *Object) Discard(del store.Deleter) error {
	o.Abort()
	var errs []error
	if !o.completed {
		errs = append(errs, o.up.Abort())
	}
	if o.completing && del != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(o.up.ctx), time.Minute)
		defer cancel()
		if err := del.Delete(ctx, o.up.key); err != nil && !store.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", o.up.key, err))
		}
	}
	o.closePool()
	return errors.Join(errs...)
}

// closePool stops the object's own pool, if it has one.
func (o *Object) closePool() {
	if o.own != nil {
		o.own.Close()
	}
}
