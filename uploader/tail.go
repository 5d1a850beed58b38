package uploader

import (
	"slices"

	"github.com/durashuffle/durashuffle/store"
)

// An object's tail, re-cut at Close.
//
// While input flows, each chunk is a part, taken by the first worker
// free. When the object's last chunk is handed over, the parts no
// worker has taken yet (its tail: chunks queued behind busy connections,
// and the last, short chunk) are cut again, so that the connections that
// take them end together instead of one connection carrying the short
// last part alone after the others are done. A re-cut part may span
// chunk buffers; it is sent from them in sequence (store.PartStreamer,
// so only a pool that streams parts re-cuts), and its buffers go back to
// the pool once every part covering them is acknowledged. Nothing is
// copied and no buffer is taken: the memory bound is the same.

// planTail cuts an object's tail, chunks (their sizes, in stream order:
// full chunks of chunk bytes but the last), into parts for connections
// that can each take a part after sending free[i] more bytes (one entry
// per connection the pool may use). Parts are taken in order, each by the
// connection free first. The last round of parts is balanced: each
// connection that can take a part of at least minPart bytes gets one
// sized so that they all end together, the one free first the largest;
// when such parts would exceed maxPart, whole chunks go first. It
// returns the parts' sizes in stream order, or nil when that ends no
// sooner than sending the chunks as they are.
func planTail(chunks []int64, free []int64, chunk, minPart, maxPart int64) []int64 {
	if len(chunks) == 0 || len(free) == 0 {
		return nil
	}
	var r int64
	for _, c := range chunks {
		r += c
	}
	f := slices.Clone(free)
	slices.Sort(f)
	var sizes []int64
	// Past one round of maxPart parts, the first bytes go as whole
	// chunks, to the connection free first.
	if n := (r - int64(len(f))*maxPart) / chunk; n > 0 {
		for range n {
			sizes = append(sizes, chunk)
			f[0] += chunk
			settle(f)
		}
		r -= n * chunk
	}
	for {
		round := balance(r, f, minPart)
		if round[0] <= maxPart || r <= chunk {
			sizes = append(sizes, round...)
			break
		}
		sizes = append(sizes, chunk)
		f[0] += chunk
		settle(f)
		r -= chunk
	}
	if slices.Equal(sizes, chunks) || finish(sizes, free) >= finish(chunks, free) {
		return nil
	}
	return sizes
}

// balance cuts r bytes into parts for the connections free after f[i]
// bytes (ascending): water-filling. With the m connections free first,
// each ends at (r + f[0] + ... + f[m-1]) / m; m is the most connections
// whose shares are all at least minPart (1 when r is smaller). Shares
// are in connection order, the largest first, and sum to r.
func balance(r int64, f []int64, minPart int64) []int64 {
	m, sum := 1, f[0]
	for m < len(f) {
		next := sum + f[m]
		// With m+1 connections, the one free last gets
		// (r + next) / (m+1) - f[m].
		if r+next-int64(m+1)*f[m] < int64(m+1)*minPart {
			break
		}
		m, sum = m+1, next
	}
	total := r + sum
	shares := make([]int64, m)
	var given int64
	for i := range m {
		shares[i] = (total - int64(m)*f[i]) / int64(m)
		given += shares[i]
	}
	for i := 0; given < r; i++ {
		shares[i]++
		given++
	}
	return shares
}

// finish is when the last of parts (sizes, in order, each taken by the
// connection free first) ends, in bytes sent from now.
func finish(parts []int64, free []int64) int64 {
	f := slices.Clone(free)
	slices.Sort(f)
	var end int64
	for _, s := range parts {
		f[0] += s
		end = max(end, f[0])
		settle(f)
	}
	return end
}

// settle restores f's ascending order after f[0] grew.
func settle(f []int64) {
	for i := 0; i+1 < len(f) && f[i] > f[i+1]; i++ {
		f[i], f[i+1] = f[i+1], f[i]
	}
}

// minPart is the smallest part but an object's last a re-cut may make.
func (p *Pool) minPart() int64 {
	if p.cfg.MinPartSize > 0 {
		return p.cfg.MinPartSize
	}
	return store.MinPartSize
}

// maxPart is the largest part a re-cut may make: two chunks, so that a
// retry resends at most twice what it would, and a buffer waits for at
// most two chunks' worth of sending before it is free again.
func (p *Pool) maxPart() int64 {
	return min(2*p.cfg.ChunkSize, store.MaxPartSize)
}

// freeAt estimates, for each connection the pool may use now
// (Concurrency, lowered while throttled), how many bytes it sends before
// it takes the next part of o: what is left of the part it is sending
// (its size, less what the recent rate says went out since it started;
// all of it before any rate is known), then the parts of other objects
// queued ahead, each by the connection free first.
func (p *Pool) freeAt(o *Upload) []int64 {
	c := p.lim.current()
	now := p.now()
	p.mu.Lock()
	f := make([]int64, 0, max(c, len(p.running)))
	for _, r := range p.running {
		left := r.size
		if p.rate > 0 {
			left -= int64(p.rate * now.Sub(r.start).Seconds())
		}
		f = append(f, max(left, 0))
	}
	p.mu.Unlock()
	for len(f) < c {
		f = append(f, 0)
	}
	slices.Sort(f)
	// Over the window (throttled), a new part starts only once the parts
	// in flight are within it: after all but the c that end last.
	f = f[len(f)-c:]
	for range p.q.others(o) {
		f[0] += p.cfg.ChunkSize
		settle(f)
	}
	return f
}

// recutLocked re-cuts o's tail once its last chunk is ready: o.ready
// holds every part no worker has taken, each a whole chunk, the last
// chunk's last. It replaces them with the parts planTail cuts, numbered
// on from the first of them, and leaves them as they are when the plan
// ends no sooner or the pool does not stream parts (a part that spans
// buffers is streamed from them). The caller then matches the queue to
// o.ready.
func (o *Upload) recutLocked() {
	p := o.pool
	if !p.streams || len(o.ready) == 0 {
		return
	}
	sizes := make([]int64, len(o.ready))
	for i, pt := range o.ready {
		if len(pt.chunks) != 1 {
			return // cut already
		}
		sizes[i] = int64(len(pt.chunks[0].buf))
	}
	first := o.ready[0].n
	plan := planTail(sizes, p.freeAt(o), p.cfg.ChunkSize, p.minPart(), p.maxPart())
	if plan == nil || int(first)-1+len(plan) > store.MaxParts {
		return
	}
	old := o.ready
	cuts := make([]*part, len(plan))
	ci, off := 0, 0 // the next byte: chunk old[ci], offset off
	for i, size := range plan {
		pt := &part{obj: o, n: first + int32(i), queued: old[ci].queued}
		for left := int(size); left > 0; {
			c := old[ci].chunks[0]
			n := min(left, len(c.buf)-off)
			pt.body.segs = append(pt.body.segs, c.buf[off:off+n])
			pt.chunks = append(pt.chunks, c)
			c.parts++
			off += n
			left -= n
			if off == len(c.buf) {
				ci, off = ci+1, 0
			}
		}
		cuts[i] = pt
	}
	for _, pt := range old {
		pt.chunks[0].parts--
	}
	o.wg.Add(len(cuts) - len(old))
	o.ready = cuts
	p.recut.Add(1)
}
