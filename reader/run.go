package reader

import (
	"context"
	"io"
	"slices"

	"github.com/durashuffle/durashuffle/store"
)

// getRun is one ranged GET, bytes [off, end) of key, that consecutive
// spans of the same object read in turn, each into its own buffer: a
// GET's size is not its buffer. The stream plans spans of up to
// RangeBytes (its buffers, its memory) and chainRuns joins neighbouring
// spans of an object into runs of up to SpanBytes (its requests). A span
// reads its bytes from the run's body when its turn comes, so the body
// is consumed in order, span by span, at the pace the stream's window
// frees buffers; the spans after it wait for their turn, not for a GET.
//
// turns[i] is closed when the run's i-th span may use the body; that
// span owns body, pos and cancel until it passes the turn on. A span
// whose turn is cancelled passes it on once it comes, so the spans
// after it are never stranded.
type getRun struct {
	ctx    context.Context // the stream's: the body outlives each span's own
	key    string
	off    int64
	end    int64
	useful int64 // bytes of its spans' frames (chainRuns)
	gap    int64 // the most bytes a span skips on the body rather than open a GET
	turns  []chan struct{}
	body   io.ReadCloser
	pos    int64              // object offset of body's next byte
	busy   bool               // a span is reading body: pos is not known
	cancel context.CancelFunc // aborts body
}

// chainRuns joins the spans of groups, in launch order, into runs: a
// span joins the run last opened on its object when it starts at or
// after the run's end with at most gapBytes between (read and dropped;
// no more than the frames of the run and the span) and the run stays
// within spanBytes. At most open runs continue at once: a run waits,
// its body open (and holding a connection), between its spans, so a
// stream that reads many objects in turn (a range of partitions, group
// by group, from more writers than that) ends the run it used least
// recently and starts a new one when it comes back to that object. A
// run of one span is no run: the span makes its own GET, as without
// runs. It returns the GETs the groups take.
func chainRuns(ctx context.Context, groups []group, spanBytes, gapBytes int64, open int) int {
	gapBytes = max(gapBytes, 0)
	var live []*getRun // runs that may continue, least recently used first
	for gi := range groups {
		for si := range groups[gi].spans {
			sp := &groups[gi].spans[si]
			i := slices.IndexFunc(live, func(r *getRun) bool { return r.key == sp.Key })
			var r *getRun
			if i >= 0 {
				r = live[i]
				live = slices.Delete(live, i, i+1)
			}
			// As within a span, a gap is read only while it is no larger
			// than the frames around it: at most half of a GET is dropped.
			if r == nil || sp.Offset < r.end || sp.Offset-r.end > min(gapBytes, r.useful+sp.useful) || sp.Offset+sp.Length-r.off > spanBytes {
				r = &getRun{ctx: ctx, key: sp.Key, off: sp.Offset, gap: gapBytes, turns: []chan struct{}{make(chan struct{})}}
				close(r.turns[0])
			} else {
				r.turns = append(r.turns, make(chan struct{}))
			}
			r.end = sp.Offset + sp.Length
			r.useful += sp.useful
			sp.run, sp.seq = r, len(r.turns)-1
			if live = append(live, r); len(live) > open {
				live = live[1:]
			}
		}
	}
	gets := 0
	for gi := range groups {
		for si := range groups[gi].spans {
			sp := &groups[gi].spans[si]
			if sp.seq == 0 {
				gets++
			}
			if len(sp.run.turns) == 1 {
				sp.run = nil
			}
		}
	}
	return gets
}

// hold waits for span seq's turn and returns the function that passes
// it on (nil run: nothing to wait for). ok is false when ctx ended
// first: the turn is passed on once it comes.
func (r *getRun) hold(ctx context.Context, seq int) (pass func(), ok bool) {
	if r == nil {
		return func() {}, true
	}
	pass = func() { r.pass(seq) }
	select {
	case <-r.turns[seq]:
		return pass, true
	case <-ctx.Done():
		r.skip(seq)
		return func() {}, false
	}
}

// skip passes span seq's turn on once it comes, without waiting (or
// drops it once the stream ends): the span's bytes came from elsewhere
// (a Source), or it stopped.
func (r *getRun) skip(seq int) {
	if r == nil {
		return
	}
	go func() {
		select {
		case <-r.turns[seq]:
			r.pass(seq)
		case <-r.ctx.Done():
			// The stream ended: no span reads the body any more, and
			// the stream's context has aborted it.
		}
	}()
}

// pass hands the body on to span seq+1; the last span closes it.
func (r *getRun) pass(seq int) {
	if seq+1 < len(r.turns) {
		close(r.turns[seq+1])
	} else {
		r.close()
	}
}

// section returns the run's body positioned at sp's first byte, for the
// span holding the turn: the open body when sp starts at or after its
// position within the run's gap (the gap is read and dropped), else a
// new GET from sp's offset to the run's end. ctx is the span's attempt:
// when it ends the body is aborted. done must be called with the bytes
// read from it and the read's error; a body that failed or was aborted
// is closed, and the next span opens a new GET from its own offset.
func (r *getRun) section(ctx context.Context, st store.Reader, sp span) (body io.Reader, done func(n int64, err error), err error) {
	if r.busy {
		r.close() // a read of it panicked: where it stands is not known
	}
	// The attempt's end aborts whatever this waits on: the gap's read,
	// and a new GET until it answers (a hedge that won must be able to
	// cut off the loser, which holds the run's turn).
	if r.body != nil && r.pos < sp.Offset && sp.Offset-r.pos <= r.gap {
		stop := context.AfterFunc(ctx, r.cancel)
		n, err := io.CopyN(io.Discard, r.body, sp.Offset-r.pos)
		r.pos += n
		if !stop() || err != nil {
			r.close()
		}
	}
	if r.body != nil && r.pos != sp.Offset {
		r.close()
	}
	if err := context.Cause(ctx); err != nil {
		return nil, nil, err
	}
	if r.body == nil {
		bctx, cancel := context.WithCancel(r.ctx)
		stop := context.AfterFunc(ctx, cancel)
		b, err := st.GetRange(bctx, r.key, sp.Offset, r.end-sp.Offset)
		if !stop() {
			if err == nil {
				b.Close()
			}
			cancel()
			return nil, nil, context.Cause(ctx)
		}
		if err != nil {
			cancel()
			return nil, nil, err
		}
		r.body, r.pos, r.cancel = b, sp.Offset, cancel
	}
	stop := context.AfterFunc(ctx, r.cancel)
	r.busy = true
	return r.body, func(n int64, err error) {
		r.pos += n
		r.busy = false
		if !stop() || err != nil {
			r.close()
		}
	}, nil
}

// close ends the run's body, if open.
func (r *getRun) close() {
	if r.body != nil {
		r.body.Close()
		r.cancel()
		r.body, r.cancel, r.busy = nil, nil, false
	}
}
