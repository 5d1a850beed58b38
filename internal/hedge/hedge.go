// Package hedge re-issues a request that takes far longer than its peers:
// once, with the first success winning, so a stuck connection costs a
// second request instead of the whole stage's tail.
//
// Race is the one way the library makes a request twice: a first
// attempt, a delay, a second attempt (the same request again, or another
// way to the same bytes), the first success winning and the loser
// cancelled and released. A Hedger supplies an adaptive delay from the
// recent latencies of one kind of request and counts its hedges
// (Hedged, Hedger.Do).
package hedge

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Hedger keeps recent latencies of one kind of request and decides when a
// request is late. Safe for concurrent use.
//
// Requests of one kind may differ in size (a 5 MiB part and a 2 GiB one,
// a range and a span of ranges): a sample of a request of n bytes stands
// for a larger request of m bytes as its latency x m / n, as if the
// larger took as long per byte; for a smaller or unsized request, as its
// latency (a small request is not faster than its latency). So a request
// is late only against its peers scaled to its own size, and a large one
// is not sent twice for being large.
type Hedger struct {
	// Factor times the recent p90 latency makes a request late.
	Factor float64
	// Min is the shortest delay before hedging, so fast requests are
	// never doubled.
	Min time.Duration
	// Samples needed before hedging starts.
	Warmup int

	mu      sync.Mutex
	recent  []sample // ring of the last len(recent) latencies
	next    int
	filled  int
	hedged  int64
	won     int64
	OnHedge func() // optional metric hook
}

// sample is a request's latency and its size in bytes (0: not sized).
type sample struct {
	d     time.Duration
	bytes int64
}

// New returns a Hedger with a window of 64 samples.
func New(factor float64, minDelay time.Duration) *Hedger {
	return &Hedger{Factor: factor, Min: minDelay, Warmup: 8, recent: make([]sample, 64)}
}

// Observe records the latency of a request made outside Do (a request
// hedged by another kind of request).
func (h *Hedger) Observe(d time.Duration) { h.observe(d, 0) }

func (h *Hedger) observe(d time.Duration, bytes int64) {
	h.mu.Lock()
	h.recent[h.next] = sample{d, bytes}
	h.next = (h.next + 1) % len(h.recent)
	h.filled = min(h.filled+1, len(h.recent))
	h.mu.Unlock()
}

// Delay is how long an unsized request may run before it is hedged; 0
// means do not hedge (not enough samples yet).
func (h *Hedger) Delay() time.Duration { return h.DelayFor(0) }

// DelayFor is how long a request of bytes bytes (0: not sized) may run
// before it is hedged: Factor times the p90 of the recent latencies,
// each scaled to its size; 0 means do not hedge (not enough samples yet).
func (h *Hedger) DelayFor(bytes int64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.filled < h.Warmup {
		return 0
	}
	s := make([]time.Duration, h.filled)
	for i, x := range h.recent[:h.filled] {
		s[i] = x.d
		if x.bytes > 0 && bytes > x.bytes {
			s[i] = time.Duration(float64(x.d) * float64(bytes) / float64(x.bytes))
		}
	}
	slices.Sort(s)
	p90 := s[min(len(s)-1, len(s)*9/10)]
	return max(h.Min, time.Duration(float64(p90)*h.Factor))
}

// Stats returns how many requests were hedged and how many of those the
// hedge won.
func (h *Hedger) Stats() (hedged, won int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hedged, h.won
}

// Do runs fn, and once more in parallel if the first run is late: a
// Race of fn against itself under h (Hedged). The first success wins and
// the other run is cancelled; Do returns only after both runs have
// returned, so fn's inputs may be reused afterwards. If both fail, the
// first run's error is returned.
//
// A run that panics fails Do with a *safe.PanicError, as does a run whose
// error wraps one (a panic fn recovered itself), whatever the other run
// did: a panic is a bug, which the other run's answer must not hide.
func (h *Hedger) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return h.DoSized(ctx, 0, fn)
}

// DoSized is Do for a request of bytes bytes: it is late against its
// peers' latencies scaled to its size (DelayFor).
func (h *Hedger) DoSized(ctx context.Context, bytes int64, fn func(ctx context.Context) error) error {
	run := func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) }
	o := Hedged(ctx, h, Race[struct{}]{First: run, Second: run, FirstOp: "a request", SecondOp: "the hedge of a request", Bytes: bytes})
	switch {
	case o.Panic != nil:
		return o.Panic
	case o.Won != None:
		return nil
	}
	return o.First.Err
}

// hedgeFired counts a second attempt.
func (h *Hedger) hedgeFired() {
	h.mu.Lock()
	h.hedged++
	h.mu.Unlock()
	if h.OnHedge != nil {
		h.OnHedge()
	}
}
