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
//
// The budget adapts to the caller. It starts at a startShare-th of its
// ceiling (read_ahead x read_range_bytes) and rises to the ceiling the
// first time Next finds no frame ready while the head is decoding one or
// a fetch is held back from decoding: the caller is idle while frames
// that arrived wait for a core, and frames decoded ahead, on other cores,
// would have been ready. A caller slower than decoding finds its frames
// ready, so its stream holds the starting budget of decoded frames, not
// the ceiling, and the frames further ahead wait stored, at about half
// the bytes. A wait while every fetch waits for its bytes, or for the
// stream's first frame, does not raise it.
type decodeGate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	budget  int64 // now
	ceiling int64 // what budget rises to
	held    int64
	waiting int // fetches held back by the budget
	head    *fetch
	closed  bool
}

// startShare is the part of the ceiling a stream's decode budget starts
// at.
const startShare = 8

func newDecodeGate(ceiling int64) *decodeGate {
	g := &decodeGate{budget: max(1, ceiling/startShare), ceiling: ceiling}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// admit waits until f may decode a frame of n logical bytes and counts
// it; false once the stream has ended.
func (g *decodeGate) admit(f *fetch, n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for !g.closed && !(g.held == 0 || g.held+n <= g.budget || g.head == f && f.queued < aheadFrames) {
		if !f.heldBack {
			f.heldBack = true
			g.waiting++
		}
		g.cond.Wait()
	}
	if f.heldBack {
		f.heldBack = false
		g.waiting--
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

// starved tells the gate that Next found no decoded frame of f (the
// head) ready. If f is decoding one (admitted, not yet sent), or any
// fetch is held back by the budget, the caller is idle while frames that
// have arrived wait to be decoded, and the budget rises to its ceiling;
// if every fetch waits for its bytes, nothing changes.
func (g *decodeGate) starved(f *fetch) {
	g.mu.Lock()
	if (f.queued > 0 || g.waiting > 0) && g.budget < g.ceiling {
		g.budget = g.ceiling
		g.cond.Broadcast()
	}
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
