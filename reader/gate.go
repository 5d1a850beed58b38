package reader

import "sync"

// decodeGate bounds the decoded frames a stream holds ahead of its
// caller. A fetch decodes a frame only while the stream's decoded frames
// not yet taken by Next stay within budget logical bytes, except that the
// fetch Next delivers from (the head) may always keep aheadFrames frames
// ready: the stream never waits for room held by frames it cannot deliver
// yet. Within the budget, fetches whose bytes have arrived decode while
// the caller is still busy with the ones before them, so the caller does
// not meet each range's decoding when it gets there.
type decodeGate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	budget int64
	held   int64
	head   *fetch
	closed bool
}

func newDecodeGate(budget int64) *decodeGate {
	g := &decodeGate{budget: budget}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// admit waits until f may decode a frame of n logical bytes and counts
// it; false once the stream has ended.
func (g *decodeGate) admit(f *fetch, n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for !g.closed && !(g.held == 0 || g.held+n <= g.budget || g.head == f && f.queued < aheadFrames) {
		g.cond.Wait()
	}
	if g.closed {
		return false
	}
	g.held += n
	f.queued++
	return true
}

// taken uncounts a frame of f of n bytes: Next took it, or it was never
// decoded.
func (g *decodeGate) taken(f *fetch, n int64) {
	g.mu.Lock()
	g.held -= n
	f.queued--
	g.cond.Broadcast()
	g.mu.Unlock()
}

// deliverFrom makes f the head.
func (g *decodeGate) deliverFrom(f *fetch) {
	g.mu.Lock()
	g.head = f
	g.cond.Broadcast()
	g.mu.Unlock()
}

// close wakes every waiting fetch for good.
func (g *decodeGate) close() {
	g.mu.Lock()
	g.closed = true
	g.cond.Broadcast()
	g.mu.Unlock()
}
