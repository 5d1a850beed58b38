package reader

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/semaphore"
)

// Records is a stream of record batches; it implements array.RecordReader.
// Next, RecordBatch, Err and Close are for one goroutine. A batch returned
// by RecordBatch is valid until the next call to Next or Close; Retain it
// to keep it longer.
type Records struct {
	refs   atomic.Int64
	schema *arrow.Schema
	stage  *Stage // whose frames the fetches decode
	ctx    context.Context
	cancel context.CancelCauseFunc

	// slots carries launched fetches in plan order. Its capacity is the
	// window, and a fetch holds its count token until the caller is done
	// with it, so the launcher never blocks on a send.
	slots  chan *fetch
	count  *semaphore.Weighted // ranges fetched or waiting, ReadAhead
	bytes  *semaphore.Weighted // their stored bytes, ReadAhead x RangeBytes
	gate   *decodeGate         // decoded frames not taken yet, as many logical bytes
	budget int64
	gets   int // ranged GETs of the stream read to the end
	plan   []Planned
	failed atomic.Bool // a fetch failed: launch nothing after it
	wg     sync.WaitGroup

	// consumer state
	cur       *fetch
	frame     decodedFrame // cur's frame being delivered
	next      int          // index in frame.recs of the next batch to deliver
	delivered bool         // a batch was delivered
	rec       arrow.RecordBatch
	part      int // partition of rec
	err       error
	done      bool
	closed    bool
}

var _ array.RecordReader = (*Records)(nil)

// stream reads spans in order, a GET each: its throughput is read_ahead
// GETs in flight (ReadStored, ReadResults).
func (s *Stage) stream(ctx context.Context, spans []span) *Records {
	gs := make([]group, len(spans))
	for i, sp := range spans {
		gs[i] = group{spans: []span{sp}, length: sp.Length}
	}
	return s.streamGroups(ctx, gs, false)
}

// streamGroups reads groups in order; spans joins each object's
// consecutive spans into GETs of up to SpanBytes (chainRuns).
func (s *Stage) streamGroups(ctx context.Context, groups []group, spans bool) *Records {
	cctx, cancel := context.WithCancelCause(ctx)
	budget := int64(s.o.ReadAhead) * s.o.RangeBytes
	r := &Records{
		gate:   newDecodeGate(budget),
		schema: s.schema,
		stage:  s,
		ctx:    cctx,
		cancel: cancel,
		slots:  make(chan *fetch, s.o.ReadAhead),
		count:  semaphore.NewWeighted(int64(s.o.ReadAhead)),
		bytes:  semaphore.NewWeighted(budget),
		budget: budget,
		plan:   plannedGroups(groups),
	}
	if spans && s.o.SpanBytes > s.o.RangeBytes {
		r.gets = chainRuns(cctx, groups, s.o.SpanBytes, s.o.GapBytes, s.o.ReadAhead)
	} else {
		for _, g := range groups {
			r.gets += len(g.spans)
		}
	}
	r.refs.Store(1)
	context.AfterFunc(cctx, r.gate.close)
	r.wg.Add(1)
	go r.launch(s, groups)
	return r
}

// Ranges is the number of ranged GETs the stream makes when read to the
// end, for request accounting.
func (r *Records) Ranges() int { return r.gets }

// Planned is one frame a stream delivers, in delivery order: its
// partition, the rows of it delivered (after a results page's skip and
// take) and its stored bytes.
type Planned struct {
	Partition int
	Rows      int64
	Stored    int64
}

// Plan lists the frames the stream delivers, in the order it delivers
// them, for progress reporting. Callers must not modify it.
func (r *Records) Plan() []Planned { return r.plan }

func plannedGroups(groups []group) []Planned {
	var out []Planned
	for _, g := range groups {
		var fs []spanFrame
		for _, sp := range g.spans {
			fs = append(fs, sp.Frames...)
		}
		if len(g.spans) > 1 {
			slices.SortStableFunc(fs, func(a, b spanFrame) int {
				return orderKey{a.Frame.Partition, a.Worker, a.Index}.compare(orderKey{b.Frame.Partition, b.Worker, b.Index})
			})
		}
		for _, f := range fs {
			rows := f.Frame.Rows - f.Skip
			if f.Take >= 0 {
				rows = min(rows, f.Take)
			}
			out = append(out, Planned{Partition: f.Frame.Partition, Rows: rows, Stored: f.Frame.Length})
		}
	}
	return out
}

// Retain adds a reference to the stream.
func (r *Records) Retain() { r.refs.Add(1) }

// Release drops a reference; the last one closes the stream.
func (r *Records) Release() {
	if r.refs.Add(-1) == 0 {
		r.Close()
	}
}

// Schema is the schema of every batch of the stream.
func (r *Records) Schema() *arrow.Schema { return r.schema }

// RecordBatch returns the current batch, valid until the next Next.
func (r *Records) RecordBatch() arrow.RecordBatch { return r.rec }

// Partition returns the partition of the current batch.
func (r *Records) Partition() int { return r.part }

// Record returns the current batch.
//
// Deprecated: use RecordBatch.
func (r *Records) Record() arrow.RecordBatch { return r.rec }

// Err returns the error that ended the stream early: a failed GET, a
// *FrameError, or the cause of the context's cancellation. It is nil at
// the end of the stream and after Close.
func (r *Records) Err() error { return r.err }

// Next advances to the next batch, waiting for its range if it has not
// arrived. It returns false at the end of the stream, on the first error
// (see Err) and once the stream is closed; no batch follows an error.
func (r *Records) Next() bool {
	if r.rec != nil {
		r.rec.Release()
		r.rec = nil
	}
	if r.done {
		return false
	}
	for {
		if f := r.cur; f != nil {
			if r.next < len(r.frame.recs) {
				r.rec, r.frame.recs[r.next] = r.frame.recs[r.next], nil
				r.part = r.frame.part
				r.next++
				r.delivered = true
				return true
			}
			var (
				d  decodedFrame
				ok bool
			)
			select {
			case d, ok = <-f.out:
			case <-r.ctx.Done():
				r.stop(context.Cause(r.ctx))
				return false
			default:
				if r.delivered {
					// The caller waits (not for the stream's first
					// frame, which it always does): if for decoding,
					// the budget grows.
					r.gate.starved(f)
				}
				select {
				case d, ok = <-f.out:
				case <-r.ctx.Done():
					r.stop(context.Cause(r.ctx))
					return false
				}
			}
			if ok {
				r.gate.taken(f, d.bytes)
				r.frame, r.next = d, 0
				continue
			}
			// out is closed: f.err is set.
			if f.err != nil {
				r.stop(f.err)
				return false
			}
			r.cur = nil
			r.count.Release(1)
			r.bytes.Release(f.weight)
		}
		var (
			f  *fetch
			ok bool
		)
		select {
		case f, ok = <-r.slots:
		case <-r.ctx.Done():
			r.stop(context.Cause(r.ctx))
			return false
		}
		if !ok {
			// The launcher only stops early when the context ended.
			r.stop(context.Cause(r.ctx))
			return false
		}
		r.cur, r.frame, r.next = f, decodedFrame{}, 0
		r.gate.deliverFrom(f)
	}
}

// stop ends the stream with err (nil: the normal end) and frees it.
func (r *Records) stop(err error) {
	if errors.Is(err, errClosed) {
		err = nil
	}
	r.err = err
	r.shutdown()
}

// Close stops the prefetch, waits for every fetch goroutine to exit and
// releases the batches still buffered. It returns Err. Idempotent.
func (r *Records) Close() error {
	r.shutdown()
	return r.err
}

func (r *Records) shutdown() {
	r.done = true
	if r.closed {
		return
	}
	r.closed = true
	r.cancel(errClosed)
	r.wg.Wait()
	if r.rec != nil {
		r.rec.Release()
		r.rec = nil
	}
	release(r.frame.recs)
	r.frame = decodedFrame{}
	if r.cur != nil {
		r.cur.release()
		r.cur = nil
	}
	for f := range r.slots {
		f.release()
	}
}

// release frees the batches a fetch decoded that were not delivered,
// once its goroutine has exited (Records.wg) and closed out.
func (f *fetch) release() {
	for d := range f.out {
		release(d.recs)
	}
}
