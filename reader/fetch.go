package reader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/semaphore"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/hedge"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/store"
)

// fetch is one group being fetched and decoded. Its frames' batches
// reach Next through out as each frame is decoded, in delivery order,
// while the group's bytes are still arriving: the caller consumes a
// range as it streams in. Decoded frames not yet taken are bounded by
// the stream's decodeGate, not by the group's size.
type fetch struct {
	group  group
	weight int64
	out    chan decodedFrame // closed after the last frame, err set first
	err    error             // after out: the frames before the failure are delivered
	// queued and heldBack are guarded by decodeGate.mu.
	queued   int  // frames admitted to decode and not taken by Next
	heldBack bool // waiting in decodeGate.admit for room in the budget
}

// decodedFrame is one frame's batches, its partition and logical bytes.
type decodedFrame struct {
	recs  []arrow.RecordBatch
	part  int
	bytes int64
}

// aheadFrames is how many decoded frames the fetch Next delivers from
// may keep ready whatever the stream's decode budget.
const aheadFrames = 2

// outFrames is the capacity of a fetch's queue of decoded frames: its
// frames, within [aheadFrames, 1024] (decodeGate bounds their bytes).
func outFrames(g group) int {
	n := 0
	for _, sp := range g.spans {
		n += len(sp.Frames)
	}
	return min(max(n, aheadFrames), 1024)
}

// decode decodes frame sf of f from b once the stream's decode budget
// admits it and hands it to Next; false (nothing held) when decoding
// failed (err) or the stream ended.
func (r *Records) decode(f *fetch, sf spanFrame, b []byte, checked bool) (bool, error) {
	if !r.gate.admit(f, sf.Frame.Bytes) {
		return false, context.Cause(r.ctx)
	}
	recs, err := decodeChecked(r.stage, sf, b, checked)
	if err != nil {
		r.gate.taken(f, sf.Frame.Bytes)
		return false, err
	}
	select {
	case f.out <- decodedFrame{recs: recs, part: sf.Frame.Partition, bytes: sf.Frame.Bytes}:
		return true, nil
	case <-r.ctx.Done():
		release(recs)
		r.gate.taken(f, sf.Frame.Bytes)
		return false, context.Cause(r.ctx)
	}
}

// launch starts fetches in plan order as the window allows. Each starts
// once a count token and its bytes are free; the semaphores are FIFO, so
// a large span is not starved by small ones behind it.
func (r *Records) launch(s *Stage, groups []group) {
	defer r.wg.Done()
	defer close(r.slots)
	for _, g := range groups {
		if r.failed.Load() {
			return
		}
		if r.count.Acquire(r.ctx, 1) != nil {
			return
		}
		// An oversized frame takes the whole budget and is fetched alone.
		w := min(g.length, r.budget)
		if r.bytes.Acquire(r.ctx, w) != nil {
			r.count.Release(1)
			return
		}
		f := &fetch{group: g, weight: w, out: make(chan decodedFrame, outFrames(g))}
		r.slots <- f
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer close(f.out)
			// A panic the fetch did not contain itself (GETs and decoding
			// do) is the group's error, delivered in its place like any.
			defer func() {
				if v := recover(); v != nil {
					f.err = safe.Recovered(v, "fetch of %v", g)
					r.failed.Store(true)
				}
			}()
			if f.err = r.fetchGroup(f, s, g); f.err != nil {
				r.failed.Store(true)
			}
		}()
	}
}

// fetchGroup fetches a group's spans and sends its frames' batches. A
// group of one span is decoded as it arrives (fetchSpan). A group of
// several is fetched ReadAhead GETs at a time, then its frames decoded
// in delivery order (partition, worker, write order). It returns why the
// frames after those sent were not delivered.
func (r *Records) fetchGroup(f *fetch, s *Stage, g group) error {
	ctx := r.ctx
	if len(g.spans) == 1 {
		return r.fetchSpan(f, s, g.spans[0])
	}
	raws := make([]rawSpan, len(g.spans))
	sem := semaphore.NewWeighted(int64(s.o.ReadAhead))
	var wg sync.WaitGroup
	for i, sp := range g.spans {
		if sem.Acquire(ctx, 1) != nil {
			raws[i] = rawSpan{err: context.Cause(ctx)}
			sp.run.skip(sp.seq)
			continue
		}
		wg.Go(func() {
			defer sem.Release(1)
			defer func() {
				if v := recover(); v != nil {
					raws[i] = rawSpan{err: safe.Recovered(v, "the fetch of a range")}
				}
			}()
			raws[i] = fetchRaw(ctx, s, sp)
		})
	}
	wg.Wait()
	var lazy []lazyFrame
	for i, sp := range g.spans {
		rw := raws[i]
		var whole int32
		for _, f := range sp.Frames {
			if end := f.At + f.Frame.Length; end <= rw.got {
				lazy = append(lazy, lazyFrame{sf: f, b: rw.buf[f.At:end], checked: rw.checked, owner: rw.pooled})
				whole++
			} else {
				lazy = append(lazy, lazyFrame{sf: f, err: shortRead(s, sp, f, rw.got, rw.err)})
			}
		}
		rw.pooled.hold(whole)
	}
	slices.SortStableFunc(lazy, func(a, b lazyFrame) int { return keyOf(a.sf).compare(keyOf(b.sf)) })
	for _, lf := range lazy {
		if lf.err != nil {
			return lf.err
		}
		ok, err := r.decode(f, lf.sf, lf.b, lf.checked)
		lf.owner.decoded(!ok || frame.Copies(lf.b))
		if !ok {
			return err
		}
	}
	return nil
}

// lazyFrame is a fetched frame's stored bytes, or why they did not arrive.
type lazyFrame struct {
	sf      spanFrame
	b       []byte
	err     error
	checked bool     // b passed its CRC32C already
	owner   *spanBuf // b's buffer, if it came from spanBufs
}

func keyOf(f spanFrame) orderKey { return orderKey{f.Frame.Partition, f.Worker, f.Index} }

// orderKey places a frame's batches in ReadPartitions' order.
type orderKey struct{ partition, worker, index int }

func (a orderKey) compare(b orderKey) int {
	return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.worker, b.worker), cmp.Compare(a.index, b.index))
}

// rawSpan is the bytes of a span that arrived, and why the rest did not.
type rawSpan struct {
	buf []byte
	got int64
	err error
	// checked: every whole frame in buf already passed its CRC32C
	// (fetchFast verified it), so decoding need not check it again.
	checked bool
	// pooled: buf came from spanBufs (a GET of this reader's own, not a
	// memory store's or a peer's bytes).
	pooled *spanBuf
	// from: the Source that served buf (SourceMemory, SourcePeer); ""
	// for the store.
	from string
}

// release returns the buffer of a span nothing refers to (a GET that
// lost a hedge, or whose answer was not kept) to spanBufs.
func (r rawSpan) release() {
	if r.pooled != nil {
		spanBufs.put(r.pooled.b)
	}
}

// fetchRaw GETs one span's bytes, hedged if the stage hedges: a
// hedge.Race of the GET against itself, the first complete answer
// winning; when both fail, the answer with the most bytes is kept. A
// panic in either request fails the span.
func fetchRaw(ctx context.Context, s *Stage, sp span) rawSpan {
	if r, ok := fetchFast(ctx, s, sp); ok {
		sp.run.skip(sp.seq)
		return r
	}
	pass, held := sp.run.hold(ctx, sp.seq)
	if !held {
		return rawSpan{err: context.Cause(ctx)}
	}
	defer pass()
	if s.o.Hedge == nil {
		r := getRange(ctx, s, sp, true)
		s.served(SourceS3, r.got)
		return r
	}
	// The request reads the run's GET; its hedge makes a GET of its own.
	var hedged atomic.Bool
	get := func(ctx context.Context) (rawSpan, error) {
		r := getRange(ctx, s, sp, !hedged.Swap(true))
		return r, r.err
	}
	o := hedge.Hedged(ctx, s.o.Hedge.h, hedge.Race[rawSpan]{First: get, Second: get,
		FirstOp: "a request", SecondOp: "the hedge of a request", Bytes: sp.Length, Release: rawSpan.release})
	if o.Panic != nil {
		return rawSpan{err: o.Panic}
	}
	best := o.Value()
	if o.Won == hedge.None {
		best = o.First.Value
		if o.Second.Ran {
			other := o.Second.Value
			if other.got > best.got {
				best, other = other, best
			}
			other.release()
		}
	}
	s.served(SourceS3, best.got)
	return best
}

// fetchSpan fetches one span, hedged if the stage hedges, and sends its
// frames' batches as each frame arrives whole and decodes: decoding
// overlaps the transfer of the frames after it, and Next may deliver a
// frame while the rest of the span is still on its way. The GETs only
// receive (a hedge judges their transfer, not how fast the caller
// consumes); this goroutine decodes and sends each frame from whichever
// GET has it whole first. The span fails only if no GET delivers a
// frame, with the error of the GET that got furthest.
func (r *Records) fetchSpan(f *fetch, s *Stage, sp span) error {
	if rw, ok := fetchFast(r.ctx, s, sp); ok {
		sp.run.skip(sp.seq)
		return r.sendFast(f, s, sp, rw)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	t := &spanTransfer{s: s, sp: sp}
	t.cond = sync.NewCond(&t.mu)
	transferred := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			t.mu.Lock()
			t.over = true
			t.cond.Broadcast()
			t.mu.Unlock()
			transferred <- err
		}()
		pass, held := sp.run.hold(ctx, sp.seq)
		defer pass()
		defer safe.Recover(&err, "the transfer of a range")
		if !held {
			err = context.Cause(ctx)
			return
		}
		if s.o.Hedge == nil {
			err = t.receive(ctx)
			return
		}
		err = s.o.Hedge.h.DoSized(ctx, sp.Length, t.receive)
	}()
	err := r.deliverSpan(f, t)
	cancel()
	if terr := <-transferred; safe.IsPanic(terr) && !safe.IsPanic(err) {
		// A bug in either GET fails the span, whatever the other got
		// (named with the frame it stopped at, when it stopped short).
		err = terr
	}
	var got int64
	for _, g := range t.gets {
		got = max(got, g.got)
		if !g.aliased {
			spanBufs.put(g.buf)
		}
	}
	s.served(SourceS3, got)
	return err
}

// spanTransfer is the GETs of one span (two under a hedge) and what each
// has received so far. mu guards every field but s and sp; cond signals
// each change.
type spanTransfer struct {
	s    *Stage
	sp   span
	mu   sync.Mutex
	cond *sync.Cond
	gets []*spanGet
	over bool // no GET receives any more, and none will start
	// ran: a GET of the span started; the first reads the span's run,
	// a hedge makes a GET of its own.
	ran atomic.Bool
}

// spanGet is one GET of a span: its buffer, the bytes received into it,
// and why it stopped short (err, set as it returns).
type spanGet struct {
	buf     []byte
	got     int64
	err     error
	aliased bool // a sent frame was uncompressed: its batches point into buf
}

// receive is one ranged GET of the span into a buffer from spanBufs,
// read at the link's pace (the first, from the span's run if it has
// one); it reports each whole frame as it lands.
func (t *spanTransfer) receive(ctx context.Context) (err error) {
	sp := t.sp
	g := &spanGet{buf: spanBufs.get(sp.Length)}
	t.mu.Lock()
	t.gets = append(t.gets, g)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		g.err = err
		t.cond.Broadcast()
		t.mu.Unlock()
	}()
	// A panic in the store's GET or body is this GET's error: the frames
	// that arrived whole before it are still delivered.
	defer safe.Recover(&err, "the store's ranged GET")
	var (
		body io.Reader
		done func(n int64, err error)
	)
	if sp.run != nil && !t.ran.Swap(true) {
		if body, done, err = sp.run.section(ctx, t.s.st, sp); err != nil {
			return err
		}
	} else {
		rc, err := t.s.st.GetRange(ctx, sp.Key, sp.Offset, sp.Length)
		if err != nil {
			return err
		}
		defer rc.Close()
		body = rc
	}
	var got int64
	for _, f := range sp.Frames {
		if end := f.At + f.Frame.Length; got < end {
			n, rerr := io.ReadFull(body, g.buf[got:end])
			got += int64(n)
			t.mu.Lock()
			g.got = got
			t.cond.Broadcast()
			t.mu.Unlock()
			if rerr != nil {
				err = rerr
				break
			}
		}
	}
	if done != nil {
		done(got, err)
	}
	return err
}

// deliverSpan sends the span's frames in order, each decoded from the
// first GET to hold it whole, waiting for the GETs as needed.
func (r *Records) deliverSpan(f *fetch, t *spanTransfer) error {
	s, sp := t.s, t.sp
	for _, sf := range sp.Frames {
		end := sf.At + sf.Frame.Length
		t.mu.Lock()
		var from *spanGet
		for {
			for _, g := range t.gets {
				if g.got >= end {
					from = g
					break
				}
			}
			if from != nil || t.over {
				break
			}
			t.cond.Wait()
		}
		t.mu.Unlock()
		if from == nil {
			// No GET got this frame whole: the error of the one that
			// got furthest comes in place of the rest.
			if len(t.gets) == 0 {
				return context.Cause(r.ctx)
			}
			best := t.gets[0]
			for _, g := range t.gets[1:] {
				if g.got > best.got {
					best = g
				}
			}
			return shortRead(s, sp, sf, best.got, best.err)
		}
		b := from.buf[sf.At:end]
		if !frame.Copies(b) {
			from.aliased = true
		}
		if ok, err := r.decode(f, sf, b, false); !ok {
			return err
		}
	}
	return nil
}

// shortRead explains a span whose body ended (or failed) before frame f
// was complete. n bytes of the span arrived.
func shortRead(s *Stage, sp span, f spanFrame, n int64, err error) error {
	got := max(0, n-f.At)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, store.ErrInvalidRange) {
		return frameErr(s, f, fmt.Errorf("%w: expected %d bytes at offset %d, got %d: %v",
			ErrTruncated, f.Frame.Length, f.Frame.Offset, got, err))
	}
	return fmt.Errorf("read %s bytes [%d, %d): got %d of %d bytes: %w", sp.Key, sp.Offset, sp.Offset+sp.Length, n, sp.Length, err)
}
