package reader

import "sync"

// decodeBudget is the policy that bounds the decoded frames a stream
// holds ahead of its caller, as a plain value: no goroutines, no locks.
// Given its state and a request it answers admit or wait and returns its
// next state; decodeGate keeps one under a mutex and makes the fetches it
// turns away wait.
//
// A fetch decodes a frame only while the stream's decoded frames not yet
// taken by Next stay within limit logical bytes, except that the fetch
// Next delivers from (the head) may always keep aheadFrames frames ready
// (the stream never waits for room held by frames it cannot deliver
// yet), and that a frame is always admitted when nothing is held (a
// frame larger than the whole budget decodes alone). Within the budget,
// fetches whose bytes have arrived decode while the caller is still busy
// with the ones before them, so the caller does not meet each range's
// decoding when it gets there.
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
type decodeBudget struct {
	limit   int64 // decoded bytes allowed ahead now
	ceiling int64 // what limit rises to
	held    int64 // decoded bytes admitted and not yet taken
	waiting int   // fetches turned away and not yet admitted or gone
}

// decodeAsk is a fetch's request to decode one frame.
type decodeAsk struct {
	bytes    int64 // the frame's logical bytes
	head     bool  // the fetch is the one Next delivers from
	queued   int   // the fetch's frames admitted and not yet taken
	heldBack bool  // the fetch was turned away before and is counted in waiting
}

// startShare is the part of the ceiling a stream's decode budget starts
// at.
const startShare = 8

// newDecodeBudget is the budget of a stream whose decoded frames may
// reach ceiling bytes: it starts at a startShare-th of it (at least 1).
func newDecodeBudget(ceiling int64) decodeBudget {
	return decodeBudget{limit: max(1, ceiling/startShare), ceiling: ceiling}
}

// admits reports whether a frame may decode now.
func (b decodeBudget) admits(a decodeAsk) bool {
	return b.held == 0 || b.held+a.bytes <= b.limit || a.head && a.queued < aheadFrames
}

// ask answers a request: admitted (the frame's bytes are held until
// take), or turned away (the fetch counts as waiting until a later ask
// admits it or it leaves).
func (b decodeBudget) ask(a decodeAsk) (decodeBudget, bool) {
	if !b.admits(a) {
		if !a.heldBack {
			b.waiting++
		}
		return b, false
	}
	if a.heldBack {
		b.waiting--
	}
	b.held += a.bytes
	return b, true
}

// leave uncounts a fetch that was turned away and will not ask again
// (the stream ended).
func (b decodeBudget) leave() decodeBudget {
	b.waiting--
	return b
}

// take uncounts an admitted frame of n bytes: Next took it, or it was
// never decoded.
func (b decodeBudget) take(n int64) decodeBudget {
	b.held -= n
	return b
}

// starve is Next finding no decoded frame of the head ready; headQueued
// is the head's frames admitted and not yet taken. If the head is
// decoding one, or a fetch is held back, the caller is idle while frames
// that have arrived wait to be decoded, and the limit rises to the
// ceiling (raised: fetches turned away may ask again); if every fetch
// waits for its bytes, nothing changes.
func (b decodeBudget) starve(headQueued int) (next decodeBudget, raised bool) {
	if (headQueued > 0 || b.waiting > 0) && b.limit < b.ceiling {
		b.limit = b.ceiling
		return b, true
	}
	return b, false
}

// decodeGate makes a stream's fetches wait for its decodeBudget: it holds
// the budget, the head and each fetch's queued and heldBack under mu, and
// wakes the waiting fetches whenever an answer may have changed.
type decodeGate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	b      decodeBudget
	head   *fetch
	closed bool
}

func newDecodeGate(ceiling int64) *decodeGate {
	g := &decodeGate{b: newDecodeBudget(ceiling)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// admit waits until f may decode a frame of n logical bytes and counts
// it; false once the stream has ended.
func (g *decodeGate) admit(f *fetch, n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for !g.closed {
		var ok bool
		g.b, ok = g.b.ask(decodeAsk{bytes: n, head: g.head == f, queued: f.queued, heldBack: f.heldBack})
		f.heldBack = !ok
		if ok {
			f.queued++
			return true
		}
		g.cond.Wait()
	}
	if f.heldBack {
		f.heldBack = false
		g.b = g.b.leave()
	}
	return false
}

// taken uncounts a frame of f of n bytes: Next took it, or it was never
// decoded.
func (g *decodeGate) taken(f *fetch, n int64) {
	g.mu.Lock()
	g.b = g.b.take(n)
	f.queued--
	g.cond.Broadcast()
	g.mu.Unlock()
}

// starved tells the gate that Next found no decoded frame of f (the
// head) ready (decodeBudget.starve).
func (g *decodeGate) starved(f *fetch) {
	g.mu.Lock()
	var raised bool
	if g.b, raised = g.b.starve(f.queued); raised {
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
