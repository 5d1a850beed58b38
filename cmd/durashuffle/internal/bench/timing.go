package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// dataClock records when the first data request (a part, a single put or
// a ranged GET) started and when the last one ended: the span during
// which the contender used the link. Before it is the pipeline's fill
// time (encoding the first chunk), after it the commit.
type dataClock struct {
	mu          sync.Mutex
	start       time.Time
	first, last time.Time
}

func (c *dataClock) begin() {
	c.mu.Lock()
	if c.first.IsZero() {
		c.first = time.Now()
	}
	c.mu.Unlock()
}

func (c *dataClock) end() {
	c.mu.Lock()
	c.last = time.Now()
	c.mu.Unlock()
}

// fill sets r's first-data and data-span figures.
func (c *dataClock) fill(r *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.IsZero() || c.start.IsZero() {
		return
	}
	r.FirstDataSeconds = c.first.Sub(c.start).Seconds()
	if c.last.After(c.first) {
		r.DataSeconds = c.last.Sub(c.first).Seconds()
		if r.DataSeconds > 0 {
			r.DataBytesPerS = float64(r.StoredBytes) / r.DataSeconds
		}
	}
}

// clockedStore times the data requests of a store.
type clockedStore struct {
	store.Store
	c *dataClock
}

func (s clockedStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	if o.IfNoneMatch { // a manifest, not data
		return s.Store.Put(ctx, key, body, o)
	}
	s.c.begin()
	defer s.c.end()
	return s.Store.Put(ctx, key, body, o)
}

func (s clockedStore) UploadPart(ctx context.Context, key, id string, n int32, body []byte, crc *uint32) (string, error) {
	s.c.begin()
	defer s.c.end()
	return s.Store.UploadPart(ctx, key, id, n, body, crc)
}

// Unwrap implements store.Unwrapper.
func (s clockedStore) Unwrap() store.Store { return s.Store }

// StreamsParts and UploadPartStream time streamed parts like UploadPart:
// the clock is a store.PartStreamer itself, so that store.As finds it
// rather than the store below.
func (s clockedStore) StreamsParts() bool { return store.StreamsParts(s.Store) }

func (s clockedStore) UploadPartStream(ctx context.Context, key, id string, n int32, size int64, body func() io.Reader) (string, uint32, error) {
	return streamPart(ctx, s.Store, key, id, n, size, body, s.c.begin, func(error) { s.c.end() })
}

// UploadsSections and UploadPartSection time parts sent from file
// sections (a spilled writer's object) like UploadPart: the clock is a
// store.SectionUploader itself, so that store.As finds it.
func (s clockedStore) UploadsSections() bool { return store.UploadsSections(s.Store) }

func (s clockedStore) UploadPartSection(ctx context.Context, key, id string, n int32, body *io.SectionReader, crc *uint32) (string, error) {
	su, ok := store.As[store.SectionUploader](s.Store)
	if !ok || !su.UploadsSections() {
		return "", fmt.Errorf("upload part %d of %s: the store does not upload file sections", n, key)
	}
	s.c.begin()
	defer s.c.end()
	return su.UploadPartSection(ctx, key, id, n, body, crc)
}
