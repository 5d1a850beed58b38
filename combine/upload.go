package combine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/store"
)

// upload writes one combined object from bytes appended in order: a
// single PutObject when it never fills a part, a multipart upload in
// parts of partBytes otherwise, each part sent with its CRC32C, up to
// inflight parts at once (each in a buffer of its own, so a task holds
// at most inflight parts besides its input). It is the one place the
// combine stage writes data; it uses the store's multipart calls
// directly.
//
// Unless keep is called, cleanUnlessKept removes what it wrote, on a
// context detached from the caller's (so a cancelled task cleans up
// too): it aborts an unfinished upload or deletes a completed object.
type upload struct {
	ctx       context.Context
	st        store.Writer
	deleter   store.Deleter
	key       string
	partBytes int64
	size      int64 // the object's size, known beforehand: no buffer larger than it
	inflight  int

	buf      []byte
	uploadID string
	parts    int // parts handed to uploads
	n        int64
	crc      uint32
	done     bool // the object exists
	kept     bool

	eg      *errgroup.Group
	egctx   context.Context
	free    chan []byte // buffers of finished parts
	made    int         // buffers allocated, at most inflight
	mu      sync.Mutex
	sent    []store.Part
	started bool
}

func (u *upload) write(b []byte) error {
	u.crc = store.UpdateCRC32C(u.crc, b)
	u.n += int64(len(b))
	for len(b) > 0 {
		if u.buf == nil {
			buf, err := u.buffer()
			if err != nil {
				return err
			}
			u.buf = buf
		}
		c := min(len(b), int(u.partBytes)-len(u.buf))
		if len(u.buf)+c > cap(u.buf) {
			u.buf = append(make([]byte, 0, min(u.partBytes, int64(len(u.buf)+c))), u.buf...)
		}
		u.buf = append(u.buf, b[:c]...)
		b = b[c:]
		if int64(len(u.buf)) == u.partBytes {
			if err := u.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// buffer returns an empty part buffer: a new one while fewer than
// inflight exist, else the next one a finished part gives back.
func (u *upload) buffer() ([]byte, error) {
	if u.made < max(1, u.inflight) {
		u.made++
		return make([]byte, 0, min(u.partBytes, max(u.size, 1))), nil
	}
	select {
	case b := <-u.free:
		return b[:0], nil
	case <-u.ctx.Done():
		return nil, fmt.Errorf("upload %s: %w", u.key, context.Cause(u.ctx))
	}
}

// flush hands the full buffer to an upload of the next part.
func (u *upload) flush() error {
	if !u.started {
		if err := u.ctx.Err(); err != nil {
			return fmt.Errorf("upload %s: %w", u.key, context.Cause(u.ctx))
		}
		id, err := u.st.CreateMultipart(u.ctx, u.key)
		if err != nil {
			return fmt.Errorf("start upload %s: %w", u.key, err)
		}
		u.uploadID, u.started = id, true
		u.eg, u.egctx = errgroup.WithContext(u.ctx)
		u.free = make(chan []byte, max(1, u.inflight))
	}
	if err := u.egctx.Err(); err != nil {
		return u.eg.Wait() // a part failed: its error
	}
	u.parts++
	n := int32(u.parts)
	if n > store.MaxParts {
		return fmt.Errorf("upload %s: part %d of %d bytes, S3 allows %d parts", u.key, n, u.partBytes, store.MaxParts)
	}
	body := u.buf
	u.buf = nil
	u.eg.Go(func() error {
		defer func() { u.free <- body }()
		sum := store.CRC32C(body)
		etag, err := u.st.UploadPart(u.egctx, u.key, u.uploadID, n, body, &sum)
		if err != nil {
			return fmt.Errorf("upload part %d of %s (%d bytes): %w", n, u.key, len(body), err)
		}
		u.mu.Lock()
		u.sent = append(u.sent, store.Part{Number: n, ETag: etag, CRC32C: &sum, Size: int64(len(body))})
		u.mu.Unlock()
		return nil
	})
	return nil
}

func (u *upload) close() error {
	if err := u.ctx.Err(); err != nil {
		return fmt.Errorf("upload %s: %w", u.key, context.Cause(u.ctx))
	}
	if !u.started {
		sum := store.CRC32C(u.buf)
		if err := u.st.Put(u.ctx, u.key, u.buf, store.PutOptions{CRC32C: &sum}); err != nil {
			u.done = true // it may have landed: cleanUnlessKept deletes it
			return fmt.Errorf("write %s (%d bytes): %w", u.key, len(u.buf), err)
		}
		u.done, u.buf = true, nil
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
	slices.SortFunc(u.sent, func(a, b store.Part) int { return int(a.Number - b.Number) })
	if err := u.st.CompleteMultipart(u.ctx, u.key, u.uploadID, u.sent); err != nil {
		u.done = true
		return fmt.Errorf("complete upload %s (%d parts, %d bytes): %w", u.key, len(u.sent), u.n, err)
	}
	u.done, u.buf = true, nil
	return nil
}

// partCount is the object's part count (1 for a single put).
func (u *upload) partCount() int { return max(1, u.parts) }

func (u *upload) keep() { u.kept = true }

func (u *upload) cleanUnlessKept() {
	if u.started {
		_ = u.eg.Wait() // no part still in flight when the upload is aborted
	}
	if u.kept {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), time.Minute)
	defer cancel()
	if u.uploadID != "" {
		_ = u.st.AbortMultipart(ctx, u.key, u.uploadID)
	}
	if u.done && u.deleter != nil {
		_ = u.deleter.Delete(ctx, u.key)
	}
}
