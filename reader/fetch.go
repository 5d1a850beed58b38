package reader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/durashuffle/durashuffle/internal/engine/frame"
	"io"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/semaphore"

	"github.com/durashuffle/durashuffle/internal/engine/safe"
	"github.com/durashuffle/durashuffle/store"
)

// fetch is one group being fetched and decoded.
type fetch struct {
	group  group
	weight int64
	done   chan struct{} // closed when recs and err are set
	recs   []arrow.RecordBatch
	parts  []int // parts[i] is the partition of recs[i]
	// ahead: the group's frames that arrived but were not decoded with
	// the fetch, decoded in delivery order by the fetch's goroutine
	// after done, at most aheadFrames beyond the one Next delivers: a
	// group holds its stored bytes and a few frames' records, not every
	// frame's records, and decoding still runs beside the caller. Closed
	// after the last frame or the first failure (sent in its place). nil
	// when every frame was decoded with the fetch.
	ahead chan decodedFrame
	err   error // after recs and ahead: the frames before the failure are delivered
}

// decodedFrame is one frame's batches and partition, or why it could
// not be decoded.
type decodedFrame struct {
	recs []arrow.RecordBatch
	part int
	err  error
}

// aheadFrames is how many decoded frames a fetch's goroutine keeps ready
// beyond the one being delivered.
const aheadFrames = 2

// decodeLazy decodes lazy into f.ahead in order, stopping at the first
// failure (sent in its place) or when the stream ends; what it cannot
// send is released.
func (r *Records) decodeLazy(f *fetch, lazy []lazyFrame) {
	defer close(f.ahead)
	for _, lf := range lazy {
		d := decodedFrame{part: lf.sf.Frame.Partition, err: lf.err}
		if d.err == nil {
			d.recs, d.err = decodeChecked(r.stage, lf.sf, lf.b, lf.checked)
			lf.owner.decoded(d.err != nil || frame.Copies(lf.b))
		}
		select {
		case f.ahead <- d:
		case <-r.ctx.Done():
			release(d.recs)
			return
		}
		if d.err != nil {
			return
		}
	}
}

// lazyFrame is a fetched frame's stored bytes, or why they did not arrive.
type lazyFrame struct {
	sf      spanFrame
	b       []byte
	err     error
	checked bool     // b passed its CRC32C already
	owner   *spanBuf // b's buffer, if it came from spanBufs
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
		f := &fetch{group: g, weight: w, done: make(chan struct{})}
		r.slots <- f
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			var lazy []lazyFrame
			func() {
				defer close(f.done)
				// A panic the fetch did not contain itself (GETs and
				// decoding do) is the group's error, delivered in its
				// place like any.
				defer func() {
					if v := recover(); v != nil {
						f.err, lazy = safe.Recovered(v, "fetch of %v", g), nil
						r.failed.Store(true)
					}
				}()
				f.recs, f.parts, lazy, f.err = fetchGroup(r.ctx, s, g, r.schema)
				if f.err != nil {
					r.failed.Store(true)
				}
				if len(lazy) > 0 {
					f.ahead = make(chan decodedFrame, aheadFrames)
				}
			}()
			if f.ahead != nil {
				r.decodeLazy(f, lazy)
			}
		}()
	}
}

// fetchGroup fetches a group's spans. A group of one span is decoded as
// it arrives (the frames before a failure returned with the failure). A
// group of several is fetched ReadAhead GETs at a time, and its frames
// returned undecoded, sorted into delivery order (partition, worker,
// write order), each with its bytes or the reason they did not arrive.
func fetchGroup(ctx context.Context, s *Stage, g group, schema *arrow.Schema) ([]arrow.RecordBatch, []int, []lazyFrame, error) {
	if len(g.spans) == 1 {
		r := fetchSpan(ctx, s, g.spans[0], schema)
		return r.recs, r.parts, r.lazy, r.err
	}
	raws := make([]rawSpan, len(g.spans))
	sem := semaphore.NewWeighted(int64(s.o.ReadAhead))
	var wg sync.WaitGroup
	for i, sp := range g.spans {
		if sem.Acquire(ctx, 1) != nil {
			raws[i] = rawSpan{err: context.Cause(ctx)}
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
	return nil, nil, lazy, nil
}

func keyOf(f spanFrame) orderKey { return orderKey{f.Frame.Partition, f.Worker, f.Index} }

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
}

// fetchRaw GETs one span's bytes, hedged if the stage hedges (the answer
// with the most bytes is kept; a panic in either request fails the span).
func fetchRaw(ctx context.Context, s *Stage, sp span) rawSpan {
	if r, ok := fetchFast(ctx, s, sp); ok {
		return r
	}
	if s.o.Hedge == nil {
		r := getRange(ctx, s, sp)
		s.served(SourceS3, r.got)
		return r
	}
	var (
		mu   sync.Mutex
		best rawSpan
		have bool
	)
	err := s.o.Hedge.h.Do(ctx, func(ctx context.Context) error {
		r := getRange(ctx, s, sp)
		mu.Lock()
		defer mu.Unlock()
		if !have || best.err != nil && (r.err == nil || r.got > best.got) {
			best, have = r, true
		}
		return r.err
	})
	if safe.IsPanic(err) {
		return rawSpan{err: err}
	}
	s.served(SourceS3, best.got)
	return best
}

// fetchSpan fetches and decodes one span, hedged if the stage hedges,
// returning each batch's partition alongside. The frames before a
// failure are returned with it, to be delivered before the error.
func fetchSpan(ctx context.Context, s *Stage, sp span, schema *arrow.Schema) *spanRead {
	if rw, ok := fetchFast(ctx, s, sp); ok {
		return decodeFast(s, sp, rw)
	}
	if s.o.Hedge == nil {
		r := readSpan(ctx, s, sp, schema)
		s.served(SourceS3, r.got)
		return r
	}
	// Each request reads and decodes on its own, since both may be
	// receiving at once; Do returns after both have stopped. Do's own
	// error is not needed: it fails only when every request did, and then
	// the request that got furthest is kept.
	var (
		mu   sync.Mutex
		best *spanRead
	)
	err := s.o.Hedge.h.Do(ctx, func(ctx context.Context) error {
		r := readSpan(ctx, s, sp, schema)
		mu.Lock()
		defer mu.Unlock()
		// A complete answer beats any partial one; between partial ones
		// the longer wins, since its whole frames are still delivered.
		if best == nil || best.err != nil && (r.err == nil || r.got > best.got) {
			if best != nil {
				release(best.recs)
			}
			best = r
		} else {
			release(r.recs)
		}
		return r.err
	})
	if safe.IsPanic(err) {
		// A bug in either request fails the span, whatever the other got.
		if best != nil {
			release(best.recs)
		}
		return &spanRead{err: err}
	}
	s.served(SourceS3, best.got)
	return best
}

// spanRead is what one GET of a span delivered: the batches of the whole
// frames that arrived and decoded, their partitions, the frames after
// them left undecoded (lazy, in the span's order, ending with an entry
// for the first frame that did not arrive, if one did not), the bytes
// that arrived, and why the rest did not.
type spanRead struct {
	recs  []arrow.RecordBatch
	parts []int
	lazy  []lazyFrame
	got   int64
	err   error
}

// decodeAhead is how many logical bytes of a span readSpan decodes as
// they arrive; the span's frames past them are decoded aheadFrames ahead
// of the caller (Records.decodeLazy). Without the cap a reader held every
// in-flight span decoded, about twice its stored bytes at LZ4's ratio,
// on top of read_ahead x read_range_bytes: the demo's 8 partitions
// read at once held 130 MiB of decoded frames.
func decodeAhead(s *Stage) int64 { return max(s.o.RangeBytes/4, 1) }

// orderKey places a frame's batches in ReadPartitions' order.
type orderKey struct{ partition, worker, index int }

func (a orderKey) compare(b orderKey) int {
	return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.worker, b.worker), cmp.Compare(a.index, b.index))
}

// readSpan is one ranged GET of sp into a fresh buffer of its size. A
// goroutine of its own receives the body, so the connection is drained
// at the link's pace, while this one decodes each frame as soon as its
// last byte has arrived: decoding overlaps the transfer of the frames
// after it, and the span is ready almost as soon as its last byte is in.
// The buffer comes from spanBufs and goes back to it unless a frame was
// uncompressed: decoded arrays of such a frame point into it.
func readSpan(ctx context.Context, s *Stage, sp span, schema *arrow.Schema) *spanRead {
	ctx, cancel := context.WithCancel(ctx)
	buf := spanBufs.get(sp.Length)
	// reuse: no record decoded from buf points into it, so it goes back
	// to spanBufs once the receiver is done with it.
	reuse := true
	// The receiver sends, for each frame in turn, the bytes of the span
	// that have arrived once the frame is whole. got and rerr are its
	// final count and error, read after it closes whole.
	whole := make(chan int64, len(sp.Frames))
	var (
		got  int64
		rerr error
	)
	// However the decoding ends, the receiver has exited when readSpan
	// returns.
	defer func() {
		cancel()
		for range whole {
		}
		if reuse {
			spanBufs.put(buf)
		}
	}()
	go func() {
		defer close(whole)
		// A panic in the store's GET or body is the span's read error:
		// the frames that arrived whole before it are still delivered.
		defer func() {
			if v := recover(); v != nil {
				rerr = safe.Recovered(v, "the store's ranged GET")
			}
		}()
		body, err := s.st.GetRange(ctx, sp.Key, sp.Offset, sp.Length)
		if err != nil {
			rerr = err
			return
		}
		defer body.Close()
		for _, f := range sp.Frames {
			if end := f.At + f.Frame.Length; got < end {
				n, err := io.ReadFull(body, buf[got:end])
				got += int64(n)
				if err != nil {
					rerr = err
					return
				}
			}
			whole <- got
		}
	}()
	r := &spanRead{}
	var decoded int64
	for _, f := range sp.Frames {
		if _, ok := <-whole; !ok {
			// Frames that arrived whole are still delivered; the error
			// comes in their place in the stream.
			r.err = shortRead(s, sp, f, got, rerr)
			if r.lazy != nil {
				r.lazy = append(r.lazy, lazyFrame{sf: f, err: r.err})
			}
			break
		}
		b := buf[f.At : f.At+f.Frame.Length]
		if decoded >= decodeAhead(s) {
			r.lazy = append(r.lazy, lazyFrame{sf: f, b: b})
			continue
		}
		reuse = reuse && frame.Copies(b)
		recs, err := decodeFrame(s, f, b, schema)
		if err != nil {
			r.err = err
			break
		}
		decoded += f.Frame.Bytes
		r.recs = append(r.recs, recs...)
		for range recs {
			r.parts = append(r.parts, f.Frame.Partition)
		}
	}
	cancel()
	for range whole {
	}
	r.got = got
	var pending int32
	for _, lf := range r.lazy {
		if lf.err == nil {
			pending++
		}
	}
	if pending > 0 {
		// The lazy frames' bytes stay in buf: it goes back to spanBufs
		// once they are decoded, unless a frame decoded here or there
		// aliases it.
		sb := &spanBuf{b: buf}
		sb.alias.Store(!reuse)
		for i := range r.lazy {
			r.lazy[i].owner = sb
		}
		sb.hold(pending)
		reuse = false
	}
	return r
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
