package store

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// ObjectWriterOptions size an ObjectWriter.
type ObjectWriterOptions struct {
	// PartBytes is the size of every part but the last (at least
	// MinPartSize for a store that enforces it).
	PartBytes int64
	// Inflight is how many parts may upload at once (default 1). Parts
	// of Write's bytes each take a buffer of their own, so the writer
	// holds at most Inflight part buffers; parts of WriteFrom's bytes
	// are slices of them and take none.
	Inflight int
	// SizeHint, when known, is the object's size: no buffer is made
	// larger than it.
	SizeHint int64
}

// ObjectWriter writes one object from bytes appended in order: a single
// Put when they never fill a part, else a multipart upload in parts of
// PartBytes, each sent with its CRC32C, up to Inflight at once. It is for
// objects built once, start to end, outside the upload pool (a seal's
// index, a combined object). Not safe for concurrent use.
//
// Whatever happens, the caller ends it with Close, then Discard unless
// the object is to stay: Discard aborts an unfinished upload and, given a
// Deleter, deletes an object that was (or may have been) written, on a
// context detached from the caller's, so a cancelled caller cleans up
// too.
type ObjectWriter struct {
	ctx  context.Context
	st   Writer
	key  string
	opts ObjectWriterOptions

	buf      []byte
	borrowed bool // buf is the caller's (WriteFrom), not a part buffer
	uploadID string
	parts    int // parts handed to uploads
	n        int64
	crc      uint32
	written  bool // the object exists, or may

	eg    *errgroup.Group
	egctx context.Context
	free  chan []byte // buffers of finished parts
	made  int         // buffers allocated, at most Inflight
	mu    sync.Mutex
	sent  []Part
}

// NewObjectWriter returns a writer of the object at key; ctx bounds
// every request it makes.
func NewObjectWriter(ctx context.Context, st Writer, key string, o ObjectWriterOptions) *ObjectWriter {
	o.Inflight = max(o.Inflight, 1)
	return &ObjectWriter{ctx: ctx, st: st, key: key, opts: o}
}

// Size is the bytes written so far.
func (u *ObjectWriter) Size() int64 { return u.n }

// CRC32C is the CRC32C of the bytes written so far.
func (u *ObjectWriter) CRC32C() uint32 { return u.crc }

// Parts is the object's part count (1 for a single put).
func (u *ObjectWriter) Parts() int { return max(1, u.parts) }

// Write appends b. A part's upload that failed fails a later Write or
// Close with its error.
func (u *ObjectWriter) Write(b []byte) (int, error) {
	n := len(b)
	u.crc = UpdateCRC32C(u.crc, b)
	u.n += int64(n)
	for len(b) > 0 {
		if u.buf == nil {
			buf, err := u.buffer()
			if err != nil {
				return n - len(b), err
			}
			u.buf = buf
		}
		c := min(len(b), int(u.opts.PartBytes)-len(u.buf))
		u.buf = append(u.buf, b[:c]...)
		b = b[c:]
		if int64(len(u.buf)) == u.opts.PartBytes {
			if err := u.flush(); err != nil {
				return n - len(b), err
			}
		}
	}
	return n, nil
}

// WriteFrom writes b, the whole object, without copying it: every part
// is a slice of b, so b must stay unchanged until Close returns (and
// Discard, after a failure). An object of at most PartBytes is one Put
// at Close. Only a writer that nothing was written to takes it.
func (u *ObjectWriter) WriteFrom(b []byte) error {
	if u.n > 0 || u.buf != nil {
		return fmt.Errorf("upload %s: WriteFrom after %d bytes were written", u.key, u.n)
	}
	u.crc = CRC32C(b)
	u.n = int64(len(b))
	u.borrowed = true
	for len(b) > 0 {
		c := min(int64(len(b)), u.opts.PartBytes)
		u.buf, b = b[:c:c], b[c:]
		if len(b) == 0 && u.uploadID == "" {
			return nil // one part: Close puts it
		}
		if err := u.flush(); err != nil {
			return err
		}
	}
	return nil
}

// buffer returns an empty part buffer: a new one while fewer than
// Inflight exist, else the next one a finished part gives back.
func (u *ObjectWriter) buffer() ([]byte, error) {
	if u.made < u.opts.Inflight {
		u.made++
		size := u.opts.PartBytes
		if u.opts.SizeHint > 0 {
			size = min(size, u.opts.SizeHint)
		}
		return make([]byte, 0, size), nil
	}
	select {
	case b := <-u.free:
		return b[:0], nil
	case <-u.ctx.Done():
		return nil, fmt.Errorf("upload %s: %w", u.key, context.Cause(u.ctx))
	}
}

// flush hands the full buffer to an upload of the next part.
func (u *ObjectWriter) flush() error {
	n, err := u.nextPart()
	if err != nil {
		return err
	}
	buf, borrowed := u.buf, u.borrowed
	u.buf = nil
	var done func()
	if !borrowed {
		done = func() { u.free <- buf }
	}
	u.send(n, BytesBody(buf).WithCRC32C(CRC32C(buf)), done)
	return nil
}

// send uploads part n with body in the writer's group and records it
// for the Complete; done, if set, runs when the request has returned.
func (u *ObjectWriter) send(n int32, body Body, done func()) {
	u.eg.Go(func() error {
		if done != nil {
			defer done()
		}
		pt, err := u.st.UploadPart(u.egctx, u.key, u.uploadID, n, body)
		if err != nil {
			return fmt.Errorf("upload part %d of %s (%s): %w", n, u.key, body, err)
		}
		u.mu.Lock()
		u.sent = append(u.sent, pt)
		u.mu.Unlock()
		return nil
	})
}

// nextPart starts the multipart upload if it is not yet, and numbers
// the next part; it fails with a part's failure.
func (u *ObjectWriter) nextPart() (int32, error) {
	if u.uploadID == "" {
		if err := u.ctx.Err(); err != nil {
			return 0, fmt.Errorf("upload %s: %w", u.key, context.Cause(u.ctx))
		}
		id, err := u.st.CreateMultipart(u.ctx, u.key)
		if err != nil {
			return 0, fmt.Errorf("start upload %s: %w", u.key, err)
		}
		u.uploadID = id
		u.eg, u.egctx = errgroup.WithContext(u.ctx)
		u.eg.SetLimit(u.opts.Inflight) // parts that take no buffer wait here
		u.free = make(chan []byte, u.opts.Inflight)
	}
	if err := u.egctx.Err(); err != nil {
		return 0, u.eg.Wait() // a part failed: its error
	}
	u.parts++
	if u.parts > MaxParts {
		return 0, fmt.Errorf("upload %s: part %d of %d bytes, S3 allows %d parts", u.key, u.parts, u.opts.PartBytes, MaxParts)
	}
	return int32(u.parts), nil
}

// WriteFromFile writes the object from r, its size bytes, without
// holding them: parts of PartBytes (the last shorter), each a section
// of r that the store reads itself, again on a retry, up to Inflight at
// once. r is read once first, for the parts' and the object's CRC32C,
// and must stay unchanged until Close returns. The object must take at
// least two parts; only a writer that nothing was written to takes it.
func (u *ObjectWriter) WriteFromFile(r io.ReaderAt, size int64) error {
	switch {
	case u.n > 0 || u.buf != nil:
		return fmt.Errorf("upload %s: WriteFromFile after %d bytes were written", u.key, u.n)
	case size <= u.opts.PartBytes:
		return fmt.Errorf("upload %s: %d bytes from a file is one part of %d; a file object takes at least two", u.key, size, u.opts.PartBytes)
	}
	var sums []uint32
	buf := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size; off += u.opts.PartBytes {
		n := min(u.opts.PartBytes, size-off)
		sum := uint32(0)
		for at := off; at < off+n; {
			b := buf[:min(int64(len(buf)), off+n-at)]
			if _, err := r.ReadAt(b, at); err != nil {
				return fmt.Errorf("upload %s: read %d bytes at %d of its file: %w", u.key, len(b), at, err)
			}
			sum = UpdateCRC32C(sum, b)
			u.crc = UpdateCRC32C(u.crc, b)
			at += int64(len(b))
		}
		sums = append(sums, sum)
	}
	u.n = size
	for i, sum := range sums {
		off := int64(i) * u.opts.PartBytes
		n, err := u.nextPart()
		if err != nil {
			return err
		}
		u.send(n, FileBody(io.NewSectionReader(r, off, min(u.opts.PartBytes, size-off))).WithCRC32C(sum), nil)
	}
	return nil
}

// Close writes what is left and completes the object: a single Put if no
// part was started, else the last part and the Complete.
func (u *ObjectWriter) Close() error {
	if err := u.ctx.Err(); err != nil {
		return fmt.Errorf("upload %s: %w", u.key, context.Cause(u.ctx))
	}
	if u.uploadID == "" {
		sum := CRC32C(u.buf)
		u.written = true // even if it fails: the put may have landed
		if err := u.st.Put(u.ctx, u.key, u.buf, PutOptions{CRC32C: &sum}); err != nil {
			return fmt.Errorf("write %s (%d bytes): %w", u.key, len(u.buf), err)
		}
		u.buf = nil
		return nil
	}
	if len(u.buf) > 0 {
		if err := u.flush(); err != nil {
			return err
		}
	}
	if err := u.eg.Wait(); err != nil {
		return err
	}
	slices.SortFunc(u.sent, func(a, b Part) int { return int(a.Number - b.Number) })
	u.written = true
	if err := u.st.CompleteMultipart(u.ctx, u.key, u.uploadID, u.sent); err != nil {
		return fmt.Errorf("complete upload %s (%d parts, %d bytes): %w", u.key, len(u.sent), u.n, err)
	}
	u.uploadID = "" // completed: nothing to abort
	return nil
}

// AbortAgain makes sure an aborted upload stays gone when parts of it
// were cut off in flight: a server may still be writing such a part when
// the abort arrives and bring the upload back once it is done (S3 says
// an abort may have to be repeated; versitygw does it). Over a store
// that lists uploads, it looks a few times, briefly apart, and aborts
// again while the upload is listed. Best effort, as the abort succeeded:
// a listing or a repeated abort that fails is left to gc and the
// bucket's lifecycle rule.
func AbortAgain(ctx context.Context, st Writer, key, uploadID string) {
	l, ok := As[Lister](st)
	if !ok {
		return
	}
	for i := range 4 {
		t := time.NewTimer(time.Duration(50<<i) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ups, err := l.ListUploads(ctx, key)
		if err != nil || !slices.ContainsFunc(ups, func(x UploadInfo) bool { return x.Key == key && x.UploadID == uploadID }) {
			return
		}
		if err := st.AbortMultipart(ctx, key, uploadID); err != nil && !IsNotFound(err) {
			return
		}
	}
}

// Discard undoes the writer once no part is in flight: it aborts an
// unfinished multipart upload and, with del, deletes the object if it
// was (or may have been) written. It waits at most a minute for the
// store, on a context detached from the caller's.
func (u *ObjectWriter) Discard(del Deleter) {
	if u.eg != nil {
		_ = u.eg.Wait()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), time.Minute)
	defer cancel()
	if u.uploadID != "" {
		if err := u.st.AbortMultipart(ctx, u.key, u.uploadID); err == nil || IsNotFound(err) {
			AbortAgain(ctx, u.st, u.key, u.uploadID)
		}
	}
	if u.written && del != nil {
		_ = del.Delete(ctx, u.key)
	}
}
