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
type Hedger struct {
	// Factor times the recent p90 latency makes a request late.
	Factor float64
	// Min is the shortest delay before hedging, so fast requests are
	// never doubled.
	Min time.Duration
	// Samples needed before hedging starts.
	Warmup int

	mu      sync.Mutex
	recent  []time.Duration // ring of the last len(recent) latencies
	next    int
	filled  int
	hedged  int64
	won     int64
	OnHedge func() // optional metric hook
}

// New returns a Hedger with a window of 64 samples.
func New(factor float64, minDelay time.Duration) *Hedger {
	return &Hedger{Factor: factor, Min: minDelay, Warmup: 8, recent: make([]time.Duration, 64)}
}

// Observe records the latency of a request made outside Do (a request
// hedged by another kind of request).
func (h *Hedger) Observe(d time.Duration) { h.observe(d) }

func (h *Hedger) observe(d time.Duration) {
	h.mu.Lock()
	h.recent[h.next] = d
	h.next = (h.next + 1) % len(h.recent)
	h.filled = min(h.filled+1, len(h.recent))
	h.mu.Unlock()
}

// Delay is how long a request may run before it is hedged; 0 means do
// not hedge (not enough samples yet).
func (h *Hedger) Delay() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.filled < h.Warmup {
		return 0
	}
	s := slices.Clone(h.recent[:h.filled])
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
	run := func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) }
	o := Hedged(ctx, h, Race[struct{}]{First: run, Second: run, FirstOp: "a request", SecondOp: "the hedge of a request"})
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
