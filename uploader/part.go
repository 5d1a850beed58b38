package uploader

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// part is one part of an object: a whole chunk while input flows, or a
// piece of a re-cut tail (see planTail) that may span chunk buffers.
// While it waits in Upload.ready it is its object's (under Upload.mu);
// the worker that claims it owns it from then on.
type part struct {
	obj    *Upload
	n      int32 // part number, 1-based
	body   body
	chunks []*chunk  // the buffers it carries bytes of
	queued time.Time // when it was handed over
	// streamed: sent while its chunk filled (its time says nothing of
	// the rate).
	streamed bool
}

// chunk is one buffer of an object's byte stream, from Pool.acquire.
type chunk struct {
	n     int32  // 1-based, in stream order
	buf   []byte // its bytes (a begun chunk's once it is complete)
	parts int    // parts ready or in flight that carry bytes of it
	// borrowed: buf is the writer's (Object.WriteFrom), not the pool's.
	borrowed bool
}

// body is a part's bytes however they are held, replayable: every
// request, a retry's or a hedge's, reads them again from the first byte,
// from the pool's buffers.
type body struct {
	// segs hold the bytes in stream order: one buffer (a whole chunk,
	// sent as one UploadPart or PutObject) or several (a re-cut part,
	// streamed from them in sequence).
	segs [][]byte
	// fill, when set, is a chunk still filling (segs is then empty): the
	// first request streams it as it fills, up to its capacity; a hedge
	// waits for it to be full and sends it from its buffer.
	fill *filling
	// file, when set, is a section of a file on disk (segs and fill are
	// then empty), crc its CRC32C: every request reads it from disk (see
	// section.go).
	file *io.SectionReader
	crc  uint32
}

// size is the body's length: a filling chunk's capacity (its length
// unless it ends short, see errShort).
func (b body) size() int64 {
	if b.file != nil {
		return b.file.Size()
	}
	if b.fill != nil {
		return int64(cap(b.fill.buf))
	}
	var n int64
	for _, s := range b.segs {
		n += int64(len(s))
	}
	return n
}

// sum is the body's CRC32C; a filling chunk's only once it is full.
func (b body) sum() uint32 {
	if b.file != nil {
		return b.crc
	}
	if b.fill != nil {
		return store.CRC32C(b.fill.buf[:cap(b.fill.buf)])
	}
	var crc uint32
	for _, s := range b.segs {
		crc = store.UpdateCRC32C(crc, s)
	}
	return crc
}

// request is what request i of the part sends (0 the first, 1 a hedge
// racing it), as a store.Body that each attempt reads from the first
// byte: a filling chunk is streamed by the first request as it fills,
// while a hedge waits for it to be full and sends its buffer; several
// buffers are streamed in sequence; one buffer or a file section is
// sent as it is, with its CRC32C when the pool sends checksums.
func (b body) request(ctx context.Context, i int, checksum bool) (store.Body, error) {
	var sb store.Body
	switch {
	case b.fill != nil && i == 0:
		return store.StreamBody(b.size(), func() io.Reader { return b.fill.reader(ctx) }), nil
	case b.fill != nil:
		size := cap(b.fill.buf)
		n, _, err := b.fill.waitFor(ctx, size)
		if err == nil && n < size {
			err = errShort
		}
		if err != nil {
			return store.Body{}, err
		}
		sb = store.BytesBody(b.fill.buf[:size])
	case b.file != nil:
		sb = store.FileBody(b.file)
	case len(b.segs) == 1:
		sb = store.BytesBody(b.segs[0])
	default:
		return store.StreamBody(b.size(), func() io.Reader {
			rs := make([]io.Reader, len(b.segs))
			for i, s := range b.segs {
				rs[i] = bytes.NewReader(s)
			}
			return io.MultiReader(rs...)
		}), nil
	}
	if checksum {
		sb = sb.WithCRC32C(b.sum())
	}
	return sb, nil
}

// describe says how long the body is and how it is sent, for errors.
func (b body) describe() string {
	switch {
	case b.file != nil:
		return fmt.Sprintf("%d bytes from a file section", b.size())
	case b.fill != nil:
		return fmt.Sprintf("streamed, %d bytes", b.size())
	case len(b.segs) > 1:
		return fmt.Sprintf("%d bytes in %d chunks", b.size(), len(b.segs))
	}
	return fmt.Sprintf("%d bytes", b.size())
}

// send stores part pt of o: the one path every part takes, whatever
// holds its bytes. An object that is one put is stored with a PutObject;
// any other part goes to the multipart upload (created first if need
// be), as an UploadPart from one buffer, or streamed (from a chunk still
// filling, or from several buffers). The request is hedged (both carry
// the same bytes, so either answer is right) and retried by the store
// (every attempt reads the body from its first byte); a streamed
// request's acknowledged CRC32C must match the body's. The stored part
// is recorded for the Complete. ctx bounds the requests (o.ctx, or a
// streamed chunk's own, which its filler can cut off).
func (o *Upload) send(ctx context.Context, pt *part) error {
	o.mu.Lock()
	st, err := o.state, o.err
	o.mu.Unlock()
	if err != nil {
		return err // a sibling failed; do not spend a request
	}
	if err := o.ctx.Err(); err != nil {
		return context.Cause(o.ctx)
	}
	single := st == stateSingle
	var id string
	if !single {
		if id, err = o.ensureUpload(); err != nil {
			return err
		}
	}
	b, size := pt.body, pt.body.size()
	// The requests made (a hedge is the second) and the winner's answer.
	var won struct {
		calls atomic.Int32
		mu    sync.Mutex
		answer
	}
	err = o.pool.hedged(ctx, size, func(ctx context.Context) error {
		a, err := o.request(ctx, pt.n, id, single, b, int(won.calls.Add(1))-1)
		if err == nil {
			won.mu.Lock()
			won.answer = a
			won.mu.Unlock()
		}
		return err
	})
	switch {
	case err != nil && single:
		return fmt.Errorf("put %s (%d bytes): %w", o.key, size, err)
	case err != nil:
		return fmt.Errorf("upload part %d of %s (%s): %w", pt.n, o.key, b.describe(), err)
	}
	a := won.answer
	if a.streamed {
		if want := b.sum(); a.crc != want {
			return fmt.Errorf("upload part %d of %s (%s): acknowledged CRC32C %08x, its bytes have %08x", pt.n, o.key, b.describe(), a.crc, want)
		}
	}
	var sum *uint32
	if o.pool.cfg.Checksum {
		sum = &a.crc
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !single {
		o.parts = append(o.parts, store.Part{Number: pt.n, ETag: a.etag, CRC32C: sum, Size: size})
	}
	o.size += size
	return nil
}

// answer is what the store said to a request that stored a part.
type answer struct {
	etag     string
	crc      uint32 // acknowledged (streamed), or sent with the bytes
	streamed bool
}

// request makes request i of part n (0 the first, 1 a hedge) with body
// b: a PutObject of the whole object (single), else an UploadPart of
// upload id.
func (o *Upload) request(ctx context.Context, n int32, id string, single bool, b body, i int) (answer, error) {
	sb, err := b.request(ctx, i, o.pool.cfg.Checksum)
	if err != nil {
		return answer{}, err
	}
	if single {
		// One put is one buffer: the object fit in its first chunk.
		buf, _ := sb.Bytes()
		sum, ok := sb.CRC32C()
		var opts store.PutOptions
		if ok {
			opts.CRC32C = &sum
		}
		return answer{crc: sum}, o.pool.st.Put(ctx, o.key, buf, opts)
	}
	pt, err := o.pool.st.UploadPart(ctx, o.key, id, n, sb)
	a := answer{etag: pt.ETag, streamed: sb.Streamed()}
	if pt.CRC32C != nil {
		a.crc = *pt.CRC32C
	}
	return a, err
}
