package combine

import (
	"context"
	"fmt"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// upload writes one combined object from bytes appended in order: a
// single PutObject when it never fills a part, a multipart upload in
// parts of partBytes otherwise, each part sent with its CRC32C. It is
// the one place the combine stage writes data; it uses the store's
// multipart calls directly, one part in flight.
//
// Unless keep is called, cleanUnlessKept removes what it wrote, on a
// context detached from the caller's (so a cancelled task cleans up
// too): it aborts an unfinished upload or deletes a completed object.
type upload struct {
	ctx       context.Context
	st        store.Writer
	key       string
	partBytes int64
	size      int64 // the object's size, known beforehand: no buffer larger than it
	buf       []byte
	uploadID  string
	sent      []store.Part
	n         int64  // bytes appended
	crc       uint32 // CRC32C of the bytes appended
	done      bool   // the object exists
	kept      bool
	deleter   store.Deleter
}

func (u *upload) write(b []byte) error {
	u.crc = store.UpdateCRC32C(u.crc, b)
	u.n += int64(len(b))
	for len(b) > 0 {
		if u.buf == nil {
			u.buf = make([]byte, 0, min(u.partBytes, max(u.size, int64(len(b)))))
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

func (u *upload) flush() error {
	if err := u.ctx.Err(); err != nil {
		return fmt.Errorf("upload %s: %w", u.key, context.Cause(u.ctx))
	}
	if u.uploadID == "" {
		id, err := u.st.CreateMultipart(u.ctx, u.key)
		if err != nil {
			return fmt.Errorf("start upload %s: %w", u.key, err)
		}
		u.uploadID = id
	}
	n := int32(len(u.sent) + 1)
	if n > store.MaxParts {
		return fmt.Errorf("upload %s: part %d of %d bytes, S3 allows %d parts", u.key, n, u.partBytes, store.MaxParts)
	}
	sum := store.CRC32C(u.buf)
	etag, err := u.st.UploadPart(u.ctx, u.key, u.uploadID, n, u.buf, &sum)
	if err != nil {
		return fmt.Errorf("upload part %d of %s (%d bytes): %w", n, u.key, len(u.buf), err)
	}
	u.sent = append(u.sent, store.Part{Number: n, ETag: etag, CRC32C: &sum, Size: int64(len(u.buf))})
	u.buf = u.buf[:0]
	return nil
}

func (u *upload) close() error {
	if err := u.ctx.Err(); err != nil {
		return fmt.Errorf("upload %s: %w", u.key, context.Cause(u.ctx))
	}
	if u.uploadID == "" {
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
	if err := u.st.CompleteMultipart(u.ctx, u.key, u.uploadID, u.sent); err != nil {
		u.done = true
		return fmt.Errorf("complete upload %s (%d parts, %d bytes): %w", u.key, len(u.sent), u.n, err)
	}
	u.done, u.buf = true, nil
	return nil
}

// parts is the object's part count (1 for a single put).
func (u *upload) parts() int { return max(1, len(u.sent)) }

func (u *upload) keep() { u.kept = true }

func (u *upload) cleanUnlessKept() {
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
