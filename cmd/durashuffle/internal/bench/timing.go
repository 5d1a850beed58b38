package bench

import (
	"context"
	"sync"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// dataClock records when the first data request (a part, a single put or
// a ranged GET) started and when the last one ended: the span during
// which the contender used the link. Before it is the pipeline's fill
// time (encoding the first chunk), after it the commit. It also records
// when the last data request started, how long the data requests took
// all together (busy: their mean count in flight over the span), and,
// when the contender says so (inputDone), when its input ended, so that
// a report shows where the time after the input goes: the wait for the
// first part, the upload, the last part's straggle.
type dataClock struct {
	mu          sync.Mutex
	start       time.Time
	first, last time.Time
	lastStart   time.Time
	busy        time.Duration
	inputEnd    time.Time
}

// begin records a data request's start and returns it for end.
func (c *dataClock) begin() time.Time {
	now := time.Now()
	c.mu.Lock()
	if c.first.IsZero() {
		c.first = now
	}
	if now.After(c.lastStart) {
		c.lastStart = now
	}
	c.mu.Unlock()
	return now
}

// end records the end of the data request begun at started.
func (c *dataClock) end(started time.Time) {
	now := time.Now()
	c.mu.Lock()
	c.last = now
	c.busy += now.Sub(started)
	c.mu.Unlock()
}

// inputDone records that a writer's input ended (it calls Commit or
// Close next); the last call is the input phase's end.
func (c *dataClock) inputDone() {
	now := time.Now()
	c.mu.Lock()
	if now.After(c.inputEnd) {
		c.inputEnd = now
	}
	c.mu.Unlock()
}

// fill sets r's first-data and data-span figures, and the input phase's
// end and the last data request's start when they are known.
func (c *dataClock) fill(r *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		return
	}
	if !c.inputEnd.IsZero() {
		r.InputSeconds = c.inputEnd.Sub(c.start).Seconds()
	}
	if c.first.IsZero() {
		return
	}
	r.FirstDataSeconds = c.first.Sub(c.start).Seconds()
	r.LastDataStartSeconds = c.lastStart.Sub(c.start).Seconds()
	if c.last.After(c.first) {
		r.DataSeconds = c.last.Sub(c.first).Seconds()
		r.LastDataSeconds = c.last.Sub(c.start).Seconds()
		if r.DataSeconds > 0 {
			r.DataBytesPerS = float64(r.StoredBytes) / r.DataSeconds
			r.DataInFlight = round3(c.busy.Seconds() / r.DataSeconds)
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
	defer s.c.end(s.c.begin())
	return s.Store.Put(ctx, key, body, o)
}

func (s clockedStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	defer s.c.end(s.c.begin())
	return s.Store.UploadPart(ctx, key, id, n, body)
}

// Unwrap implements store.Unwrapper.
func (s clockedStore) Unwrap() store.Store { return s.Store }

// StreamsParts passes on whether the store below streams parts, which
// UploadPart times like any other.
func (s clockedStore) StreamsParts() bool { return store.StreamsParts(s.Store) }
