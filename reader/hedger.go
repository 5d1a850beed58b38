package reader

import (
	"time"

	"github.com/durashuffle/durashuffle/internal/hedge"
)

// A Hedger decides when a read is late and sends it once more: a request
// that runs longer than factor times the p90 of its recent peers (at
// least minDelay) is re-issued and the first complete answer wins. Its
// window of recent latencies is what makes a request late, so share one
// among the stages of a client (Options.Hedge) and another among their
// Source fetches (Options.SourceHedge). Safe for concurrent use.
type Hedger struct{ h *hedge.Hedger }

// NewHedger returns a Hedger with the client's hedge_factor and
// hedge_min_delay.
func NewHedger(factor float64, minDelay time.Duration) *Hedger {
	return &Hedger{h: hedge.New(factor, minDelay)}
}

// Stats returns how many requests were hedged and how many of those the
// second request won.
func (h *Hedger) Stats() (hedged, won int64) { return h.h.Stats() }
