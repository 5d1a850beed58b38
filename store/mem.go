package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mem is an in-memory Store for tests and benchmarks. It behaves like S3
// where durashuffle relies on it: If-None-Match puts, ranged GETs (a
// range starting past the end is ErrInvalidRange, one running past it is
// cut short), multipart uploads assembled on Complete. It counts GETs and
// the bytes they return. Safe for concurrent use; the zero value is
// ready.
type Mem struct {
	mu      sync.Mutex
	objs    map[string]memObj
	uploads map[string]*memUpload
	next    int

	gets     atomic.Int64
	getBytes atomic.Int64
	// Discard, if set, is consulted on every write: a key it returns true
	// for is accepted and its bytes dropped (for benchmarks that must not
	// hold their output).
	Discard func(key string) bool
}

type memObj struct {
	b   []byte
	mod time.Time
}

type memUpload struct {
	key   string
	parts map[int32][]byte
	init  time.Time
}

// Gets returns the GETs served and the bytes they returned.
func (m *Mem) Gets() (gets, bytes int64) { return m.gets.Load(), m.getBytes.Load() }

// GetRange implements Reader.
func (m *Mem) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	o, ok := m.objs[key]
	m.mu.Unlock()
	m.gets.Add(1)
	if !ok {
		return nil, &Error{Op: "GetObject", Key: key, Status: 404, Err: ErrNotFound}
	}
	n := int64(len(o.b))
	if off > n || off == n && n > 0 || off < 0 {
		return nil, &Error{Op: "GetObject", Key: key, Status: 416, Err: ErrInvalidRange}
	}
	end := n
	if length >= 0 {
		end = min(off+length, n)
	}
	m.getBytes.Add(end - off)
	return io.NopCloser(bytes.NewReader(o.b[off:end])), nil
}

func (m *Mem) store(key string, b []byte) {
	if m.Discard != nil && m.Discard(key) {
		b = nil
	}
	if m.objs == nil {
		m.objs = map[string]memObj{}
	}
	m.objs[key] = memObj{b: b, mod: time.Now()}
}

// Put implements Writer. The body is copied.
func (m *Mem) Put(ctx context.Context, key string, body []byte, opts PutOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if opts.CRC32C != nil {
		if got := CRC32C(body); got != *opts.CRC32C {
			return badDigest("PutObject", key, got, *opts.CRC32C)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; ok && opts.IfNoneMatch {
		return &Error{Op: "PutObject", Key: key, Status: 412, Err: ErrPreconditionFailed}
	}
	m.store(key, slices.Clone(body))
	return nil
}

// CreateMultipart implements Writer.
func (m *Mem) CreateMultipart(ctx context.Context, key string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.uploads == nil {
		m.uploads = map[string]*memUpload{}
	}
	m.next++
	id := fmt.Sprintf("upload-%d", m.next)
	m.uploads[id] = &memUpload{key: key, parts: map[int32][]byte{}, init: time.Now()}
	return id, nil
}

// UploadPart implements Writer: the body is read into memory (the store
// keeps its parts there), a streamed one too.
func (m *Mem) UploadPart(ctx context.Context, key, uploadID string, n int32, body Body) (Part, error) {
	b, ok := body.Bytes()
	if !ok {
		b = make([]byte, body.Size())
		if _, err := io.ReadFull(body.Reader(), b); err != nil {
			return Part{}, &Error{Op: "UploadPart", Key: key, Err: fmt.Errorf("part %d: read its %s: %w", n, body, err)}
		}
	}
	pt := Part{Number: n, Size: int64(len(b))}
	got := CRC32C(b)
	if sum, ok := body.CRC32C(); ok {
		if got != sum {
			return Part{}, badDigest("UploadPart", key, got, sum)
		}
		pt.CRC32C = &sum
	} else if body.Streamed() {
		pt.CRC32C = &got
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.uploads[uploadID]
	if !ok || u.key != key {
		return Part{}, &Error{Op: "UploadPart", Key: key, Status: 404, Err: ErrNotFound}
	}
	if m.Discard != nil && m.Discard(key) {
		u.parts[n] = nil
	} else {
		u.parts[n] = slices.Clone(b)
	}
	pt.ETag = fmt.Sprintf("etag-%d", n)
	return pt, nil
}

// CompleteMultipart implements Writer.
func (m *Mem) CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.uploads[uploadID]
	if !ok || u.key != key {
		return &Error{Op: "CompleteMultipartUpload", Key: key, Status: 404, Err: ErrNotFound}
	}
	for i := 1; i < len(parts); i++ {
		if parts[i].Number <= parts[i-1].Number {
			return &Error{Op: "CompleteMultipartUpload", Key: key, Status: 400, Code: "InvalidPartOrder",
				Err: fmt.Errorf("part %d listed after part %d: part numbers must ascend", parts[i].Number, parts[i-1].Number)}
		}
	}
	var b []byte
	for _, p := range parts {
		body, ok := u.parts[p.Number]
		if !ok {
			return &Error{Op: "CompleteMultipartUpload", Key: key, Status: 400, Err: fmt.Errorf("part %d was not uploaded", p.Number)}
		}
		b = append(b, body...)
	}
	delete(m.uploads, uploadID)
	m.store(key, b)
	return nil
}

// AbortMultipart implements Writer.
func (m *Mem) AbortMultipart(ctx context.Context, key, uploadID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.uploads, uploadID)
	return nil
}

// List implements Lister.
func (m *Mem) List(ctx context.Context, prefix, delimiter string) ([]ObjectInfo, []string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var (
		objs []ObjectInfo
		dirs []string
		seen = map[string]bool{}
	)
	for k, o := range m.objs {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		if delimiter != "" {
			if i := strings.Index(rest, delimiter); i >= 0 {
				d := prefix + rest[:i+len(delimiter)]
				if !seen[d] {
					seen[d] = true
					dirs = append(dirs, d)
				}
				continue
			}
		}
		objs = append(objs, ObjectInfo{Key: k, Size: int64(len(o.b)), LastModified: o.mod})
	}
	slices.SortFunc(objs, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	slices.Sort(dirs)
	return objs, dirs, nil
}

// ListUploads implements Lister.
func (m *Mem) ListUploads(ctx context.Context, prefix string) ([]UploadInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []UploadInfo
	for id, u := range m.uploads {
		if strings.HasPrefix(u.key, prefix) {
			out = append(out, UploadInfo{Key: u.key, UploadID: id, Initiated: u.init})
		}
	}
	slices.SortFunc(out, func(a, b UploadInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete implements Deleter.
func (m *Mem) Delete(ctx context.Context, keys ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.objs, k)
	}
	return nil
}

// Bytes returns a copy of an object's bytes (nil, false if absent).
func (m *Mem) Bytes(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	return slices.Clone(o.b), ok
}

// Set stores an object as is, bypassing every check (to plant damage).
func (m *Mem) Set(key string, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.store(key, b)
}

var _ Store = (*Mem)(nil)

// badDigest is S3's answer to a body whose CRC32C is not the one sent.
func badDigest(op, key string, got, sent uint32) error {
	return &Error{Op: op, Key: key, Status: 400, Code: "BadDigest",
		Err: fmt.Errorf("the body's CRC32C is %08x, the request says %08x", got, sent)}
}
