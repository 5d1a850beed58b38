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
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/semaphore"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/hedge"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// Defaults of Options, as in the configuration (read_range_bytes,
// read_ahead, read_gap_bytes).
const (
	DefaultRangeBytes = 8 << 20
	DefaultReadAhead  = 4
	DefaultGapBytes   = 256 << 10
)

// Sentinel errors. Frame failures arrive as a *FrameError wrapping one of
// ErrChecksum, ErrTruncated or frame.ErrCorrupt.
var (
	// ErrChecksum: a frame's stored bytes do not match the CRC32C in the
	// manifest.
	ErrChecksum = errors.New("frame checksum mismatch")
	// ErrTruncated: a data object ends before a frame the manifest places
	// in it.
	ErrTruncated = errors.New("data object truncated")
	// ErrPartition: a requested partition is not in the stage.
	ErrPartition = errors.New("partition out of range")
)

// errClosed is the cancellation cause of a stream its caller closed; it
// is never reported, since the caller asked for it.
var errClosed = errors.New("reader closed")

// Options tune a Stage's reads. The zero value means the defaults.
type Options struct {
	// RangeBytes is the largest ranged GET (default 8 MiB). Larger ranges
	// mean fewer requests and more memory per range in flight; a frame
	// larger than this is still fetched whole, in a GET of its own.
	RangeBytes int64
	// ReadAhead is the window of ranges a stream holds: in flight,
	// decoded and waiting, or being delivered (default 4). The range being
	// delivered counts, so 1 fetches only when the caller asks and 4 keeps
	// up to 3 GETs in flight while the caller consumes. Stored bytes held
	// are at most ReadAhead x RangeBytes, or one oversized frame alone,
	// whatever the stage's size; the decoded records of those ranges come
	// on top.
	ReadAhead int
	// GapBytes: frames separated by at most this many bytes are fetched in
	// one GET, and the gap is read and dropped (default 256 KiB). Negative
	// means only directly adjacent frames share a GET (config
	// read_gap_bytes: 0 maps to -1 here).
	GapBytes int64
	// Mem allocates decoded records (default memory.DefaultAllocator).
	Mem memory.Allocator
	// Hedge, if set, re-issues a ranged GET that runs far longer than its
	// recent peers (hedge_factor times their p90, at least
	// hedge_min_delay), once, and keeps the first complete answer; the
	// other GET is cancelled. A hedged range briefly holds a second
	// buffer of its size, on top of the ReadAhead x RangeBytes above.
	// Share one Hedger among a client's stages: its window of recent
	// latencies is what makes a GET late. nil: no hedging.
	Hedge *hedge.Hedger
	// Source, if set, is asked for each range before the store (a memory
	// store, peer sidecars): see Source. Every frame it returns is checked
	// against the manifest's CRC32C; what it does not serve, or serves
	// wrong, is read from the store.
	Source Source
	// SourceHedge times Source fetches: one running longer than its delay
	// (hedge_factor times the recent p90) is hedged by a GET of the same
	// range from the store, and the first complete answer wins. Before it
	// has samples, or when nil, SourceDelay is the delay.
	SourceHedge *hedge.Hedger
	// SourceDelay is the hedge delay of a Source fetch while SourceHedge
	// has no samples (0: never hedge then).
	SourceDelay time.Duration
	// Observer counts bytes by source and fallbacks by reason (nil: not
	// counted).
	Observer Observer
}

func (o Options) withDefaults() Options {
	if o.RangeBytes <= 0 {
		o.RangeBytes = DefaultRangeBytes
	}
	if o.ReadAhead <= 0 {
		o.ReadAhead = DefaultReadAhead
	}
	if o.GapBytes == 0 {
		o.GapBytes = DefaultGapBytes
	}
	if o.Mem == nil {
		o.Mem = memory.DefaultAllocator
	}
	return o
}

// Stage is an opened stage: its manifest and schema, ready to stream any
// of its partitions. Safe for concurrent use; every Read call returns an
// independent stream.
type Stage struct {
	st        store.Reader
	l         manifest.Layout
	m         *manifest.Stage
	o         Options
	schema    *arrow.Schema
	schemaErr error
	dec       *frame.Decoder
	keys      [][]string // keys[w][o]: full key of worker w's object o
}

// Open loads the stage's manifest (exactly one GET when the stage is
// sealed; a LIST and a GET per worker manifest otherwise) and returns the
// stage. A sealed stage's frame entries are not loaded: each read
// fetches the entries of its partitions from the stage's index (one
// ranged GET for a partition range). st should already carry the retry layer: the reader does not
// retry on its own.
func Open(ctx context.Context, st store.Store, l manifest.Layout, query string, stage int, o Options) (*Stage, error) {
	m, err := manifest.LoadStage(ctx, st, l, query, stage)
	if err != nil {
		return nil, err
	}
	s := FromManifest(st, l, m, o)
	if s.schemaErr != nil {
		return nil, s.schemaErr
	}
	return s, nil
}

// FromManifest returns a stage for a manifest already in hand, without
// any request. A schema that does not decode is reported by every Read.
func FromManifest(st store.Reader, l manifest.Layout, m *manifest.Stage, o Options) *Stage {
	s := &Stage{st: st, l: l, m: m, o: o.withDefaults()}
	if len(m.Schema) == 0 {
		// A stage whose writers never saw a record may have no schema.
		s.schema = arrow.NewSchema(nil, nil)
	} else if s.schema, s.schemaErr = frame.DecodeSchema(m.Schema); s.schemaErr != nil {
		s.schemaErr = fmt.Errorf("%s stage %d: %w", m.Query, m.Stage, s.schemaErr)
	}
	if s.schemaErr == nil {
		if s.dec, s.schemaErr = frame.NewDecoder(s.schema); s.schemaErr != nil {
			s.schemaErr = fmt.Errorf("%s stage %d: %w", m.Query, m.Stage, s.schemaErr)
		}
	}
	s.keys = make([][]string, len(m.Workers))
	for i, w := range m.Workers {
		s.keys[i] = make([]string, len(w.Objects))
		for j, obj := range w.Objects {
			s.keys[i][j] = l.ObjectKey(m.Query, m.Stage, obj.Key)
		}
	}
	return s
}

// Manifest returns the stage's manifest: its workers' headers and, when
// sealed, the reference to its index. It holds no frame entries of a
// sealed stage; Summary and the reads fetch what they need. Callers must
// not modify it.
func (s *Stage) Manifest() *manifest.Stage { return s.m }

// Summary returns each partition's rows, bytes and frames: one ranged GET
// of the index's summary table when the stage is sealed, none otherwise.
func (s *Stage) Summary(ctx context.Context) ([]manifest.PartitionStats, error) {
	return s.m.Summary(ctx, s.st, s.l)
}

// Schema returns the schema of every record of the stage (nil only when
// the manifest's schema does not decode).
func (s *Stage) Schema() *arrow.Schema { return s.schema }

// ReadPartitions streams the records of the given partitions: one, a set
// or a range, in any order and with repeats; nil or empty means all. The
// stream's order is fixed: partitions ascending, then workers in manifest
// order, then each worker's frames in write order. ctx governs the whole
// stream, not just this call: cancelling it stops the prefetch and makes
// Next return false with the cause in Err. A partition outside the stage
// fails at once, naming it and the partition count.
//
// A set of several partitions is read in groups of neighbouring
// partitions of up to three quarters of the window's bytes (ReadAhead x
// RangeBytes): each group's frames are fetched in storage order, every
// worker's run of them in one GET of up to RangeBytes (the frames of
// neighbouring partitions lie together in each sorted run), ReadAhead
// GETs at a time, and then decoded one by one as Next reaches them, in
// the order above: a group holds its stored bytes and the records of
// the frame being delivered. A range of partitions so costs about one
// GET per writer object and run per group, not one per frame; a
// partition larger than a group streams on its own.
func (s *Stage) ReadPartitions(ctx context.Context, partitions []int) (*Records, error) {
	ws, err := s.partitionFrames(ctx, partitions)
	if err != nil {
		return nil, err
	}
	budget := int64(s.o.ReadAhead) * s.o.RangeBytes
	return s.streamGroups(ctx, partitionGroups(ws, s.o.RangeBytes, s.o.GapBytes, budget*3/4)), nil
}

// partitionFrames lists the frames of the given partitions (nil or empty:
// all) in ReadPartitions' order, failing on a schema that does not decode
// or a partition outside the stage. A sealed stage's come from its index:
// one ranged GET for the entries of partitions [min, max].
func (s *Stage) partitionFrames(ctx context.Context, partitions []int) ([]want, error) {
	if s.schemaErr != nil {
		return nil, s.schemaErr
	}
	ps, err := normalizePartitions(partitions, s.m.Partitions)
	if err != nil {
		return nil, fmt.Errorf("read %s stage %d: %w", s.m.Query, s.m.Stage, err)
	}
	if s.m.Index == nil {
		return selectFrames(s.m, s.keys, ps), nil
	}
	fs, err := s.m.Frames(ctx, s.st, s.l, ps)
	if err != nil {
		return nil, fmt.Errorf("read %s stage %d: %w", s.m.Query, s.m.Stage, err)
	}
	return wantFrames(fs, s.keys), nil
}

// ReadStored streams the records of the given partitions (nil or empty:
// all) in the order they are stored rather than by partition: worker by
// worker, each worker's frames in write order. Neighbouring frames share
// a ranged GET whatever their partition, so reading a whole stage, or a
// partition range whose frames lie close together, takes GETs of
// RangeBytes (as a whole-object download would) instead of one GET per
// frame; the window (ReadAhead) is the number of GETs in flight. It is
// for consumers that do not need partition order (a hash aggregation, a
// copy, a results download): Records.Partition says which partition each
// batch belongs to. Every frame is CRC-checked and decoded as with
// ReadPartitions; the same frames are delivered, in another order.
func (s *Stage) ReadStored(ctx context.Context, partitions []int) (*Records, error) {
	ws, err := s.partitionFrames(ctx, partitions)
	if err != nil {
		return nil, err
	}
	return s.stream(ctx, evenSpans(storageOrder(ws), s.o.RangeBytes, s.o.GapBytes, s.o.ReadAhead)), nil
}

// ReadResults streams rows [offset, offset+limit) of the whole stage in
// ReadPartitions' order (limit < 0: to the end). The manifest's row counts
// pick the frames that hold the page, so frames before it are never
// fetched and fetching stops at its last row: page N costs GETs for the
// frames of page N only. The first and last batches are sliced to the
// page's bounds.
func (s *Stage) ReadResults(ctx context.Context, offset, limit int64) (*Records, error) {
	if s.schemaErr != nil {
		return nil, s.schemaErr
	}
	if offset < 0 {
		return nil, fmt.Errorf("read results of %s stage %d: offset %d is negative", s.m.Query, s.m.Stage, offset)
	}
	all, err := s.partitionFrames(ctx, nil)
	if err != nil {
		return nil, err
	}
	ws := pageFrames(all, offset, limit)
	return s.stream(ctx, planSpans(ws, s.o.RangeBytes, s.o.GapBytes)), nil
}

// FrameError says which frame failed and why. Err wraps ErrChecksum,
// ErrTruncated or frame.ErrCorrupt.
type FrameError struct {
	Key       string // full key of the data object
	Offset    int64  // frame's offset in the object
	Length    int64  // frame's length per the manifest
	Partition int
	Worker    string
	Err       error
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("frame of partition %d at offset %d (%d bytes) of %s (worker %s): %v",
		e.Partition, e.Offset, e.Length, e.Key, e.Worker, e.Err)
}

func (e *FrameError) Unwrap() error { return e.Err }

// Records is a stream of record batches; it implements array.RecordReader.
// Next, RecordBatch, Err and Close are for one goroutine. A batch returned
// by RecordBatch is valid until the next call to Next or Close; Retain it
// to keep it longer.
type Records struct {
	refs   atomic.Int64
	schema *arrow.Schema
	stage  *Stage // decodes a group's frames as Next reaches them
	ctx    context.Context
	cancel context.CancelCauseFunc

	// slots carries launched fetches in plan order. Its capacity is the
	// window, and a fetch holds its count token until the caller is done
	// with it, so the launcher never blocks on a send.
	slots  chan *fetch
	count  *semaphore.Weighted // ranges fetched or waiting, ReadAhead
	bytes  *semaphore.Weighted // their stored bytes, ReadAhead x RangeBytes
	budget int64
	spans  int
	plan   []Planned
	failed atomic.Bool // a fetch failed: launch nothing after it
	wg     sync.WaitGroup

	// consumer state
	cur    *fetch
	next   int // index in cur.recs of the next batch to deliver
	rec    arrow.RecordBatch
	part   int // partition of rec
	err    error
	done   bool
	closed bool
}

var _ array.RecordReader = (*Records)(nil)

// fetch is one group being fetched and decoded.
type fetch struct {
	group  group
	weight int64
	done   chan struct{} // closed when recs and err are set
	recs   []arrow.RecordBatch
	parts  []int // parts[i] is the partition of recs[i]
	// lazy: a group's frames, fetched but not decoded, in delivery order;
	// Next decodes each when it gets there, so a group holds its stored
	// bytes and one frame's records, not every frame's records.
	lazy []lazyFrame
	err  error // after recs (and lazy): the frames before the failure are delivered
}

// lazyFrame is a fetched frame's stored bytes, or why they did not arrive.
type lazyFrame struct {
	sf      spanFrame
	b       []byte
	err     error
	checked bool // b passed its CRC32C already
}

func (s *Stage) stream(ctx context.Context, spans []span) *Records {
	gs := make([]group, len(spans))
	for i, sp := range spans {
		gs[i] = group{spans: []span{sp}, length: sp.Length}
	}
	return s.streamGroups(ctx, gs)
}

func (s *Stage) streamGroups(ctx context.Context, groups []group) *Records {
	cctx, cancel := context.WithCancelCause(ctx)
	budget := int64(s.o.ReadAhead) * s.o.RangeBytes
	r := &Records{
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
	for _, g := range groups {
		r.spans += len(g.spans)
	}
	r.refs.Store(1)
	r.wg.Add(1)
	go r.launch(s, groups)
	return r
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
			defer close(f.done)
			f.recs, f.parts, f.lazy, f.err = fetchGroup(r.ctx, s, g, r.schema)
			if f.err != nil {
				r.failed.Store(true)
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
		return r.recs, r.parts, nil, r.err
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
			raws[i] = fetchRaw(ctx, s, sp)
		})
	}
	wg.Wait()
	var lazy []lazyFrame
	for i, sp := range g.spans {
		rw := raws[i]
		for _, f := range sp.Frames {
			if end := f.At + f.Frame.Length; end <= rw.got {
				lazy = append(lazy, lazyFrame{sf: f, b: rw.buf[f.At:end], checked: rw.checked})
			} else {
				lazy = append(lazy, lazyFrame{sf: f, err: shortRead(s, sp, f, rw.got, rw.err)})
			}
		}
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
}

// fetchRaw GETs one span's bytes, hedged if the stage hedges (the answer
// with the most bytes is kept).
func fetchRaw(ctx context.Context, s *Stage, sp span) rawSpan {
	if r, ok := fetchFast(ctx, s, sp); ok {
		return r
	}
	get := func(ctx context.Context) rawSpan {
		buf := make([]byte, sp.Length)
		body, err := s.st.GetRange(ctx, sp.Key, sp.Offset, sp.Length)
		if err != nil {
			return rawSpan{buf: buf, err: err}
		}
		defer body.Close()
		n, err := io.ReadFull(body, buf)
		return rawSpan{buf: buf, got: int64(n), err: err}
	}
	if s.o.Hedge == nil {
		r := get(ctx)
		s.served(SourceS3, r.got)
		return r
	}
	var (
		mu   sync.Mutex
		best rawSpan
		have bool
	)
	_ = s.o.Hedge.Do(ctx, func(ctx context.Context) error {
		r := get(ctx)
		mu.Lock()
		defer mu.Unlock()
		if !have || best.err != nil && (r.err == nil || r.got > best.got) {
			best, have = r, true
		}
		return r.err
	})
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
	_ = s.o.Hedge.Do(ctx, func(ctx context.Context) error {
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
	s.served(SourceS3, best.got)
	return best
}

// spanRead is what one GET of a span delivered: the batches of the whole
// frames that arrived and decoded, their partitions, the bytes that
// arrived, and why the rest did not.
type spanRead struct {
	recs  []arrow.RecordBatch
	parts []int
	got   int64
	err   error
}

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
// The buffer is never reused: decoded arrays of an uncompressed frame
// point into it.
func readSpan(ctx context.Context, s *Stage, sp span, schema *arrow.Schema) *spanRead {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	buf := make([]byte, sp.Length)
	// The receiver sends, for each frame in turn, the bytes of the span
	// that have arrived once the frame is whole. got and rerr are its
	// final count and error, read after it closes whole.
	whole := make(chan int64, len(sp.Frames))
	var (
		got  int64
		rerr error
	)
	go func() {
		defer close(whole)
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
	for _, f := range sp.Frames {
		if _, ok := <-whole; !ok {
			// Frames that arrived whole are still delivered; the error
			// comes in their place in the stream.
			r.got, r.err = got, shortRead(s, sp, f, got, rerr)
			return r
		}
		recs, err := decodeFrame(s, f, buf[f.At:f.At+f.Frame.Length], schema)
		if err != nil {
			r.err = err
			break
		}
		r.recs = append(r.recs, recs...)
		for range recs {
			r.parts = append(r.parts, f.Frame.Partition)
		}
	}
	cancel()
	for range whole {
	}
	r.got = got
	return r
}

func frameErr(s *Stage, f spanFrame, err error) *FrameError {
	return &FrameError{Key: f.Key, Offset: f.Frame.Offset, Length: f.Frame.Length,
		Partition: f.Frame.Partition, Worker: s.m.Workers[f.Worker].Worker, Err: err}
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

// decodeFrame verifies b against the manifest and decodes it, applying
// the frame's Skip and Take.
func decodeFrame(s *Stage, f spanFrame, b []byte, schema *arrow.Schema) ([]arrow.RecordBatch, error) {
	return decodeChecked(s, f, b, false)
}

// decodeChecked is decodeFrame, skipping the CRC32C of bytes that already
// passed it (checked).
func decodeChecked(s *Stage, f spanFrame, b []byte, checked bool) ([]arrow.RecordBatch, error) {
	if !checked {
		if got := store.CRC32C(b); got != f.Frame.CRC32C {
			return nil, frameErr(s, f, fmt.Errorf("%w: stored bytes have CRC32C %08x, manifest says %08x", ErrChecksum, got, f.Frame.CRC32C))
		}
	}
	recs, err := s.dec.Decode(b, s.o.Mem)
	if err != nil {
		return nil, frameErr(s, f, err)
	}
	var rows int64
	for _, rec := range recs {
		rows += rec.NumRows()
	}
	if rows != f.Frame.Rows {
		release(recs)
		return nil, frameErr(s, f, fmt.Errorf("%w: %d rows decoded, manifest says %d", frame.ErrCorrupt, rows, f.Frame.Rows))
	}
	return slice(recs, f.Skip, f.Take), nil
}

// slice keeps rows [skip, skip+take) of recs (take < 0: to the end),
// releasing what it drops. Empty batches are dropped too.
func slice(recs []arrow.RecordBatch, skip, take int64) []arrow.RecordBatch {
	out := recs[:0]
	for _, rec := range recs {
		n := rec.NumRows()
		lo := min(skip, n)
		skip -= lo
		hi := n
		if take >= 0 {
			hi = min(n, lo+take)
			take -= hi - lo
		}
		switch {
		case lo == hi:
			rec.Release()
		case lo == 0 && hi == n:
			out = append(out, rec)
		default:
			out = append(out, rec.NewSlice(lo, hi))
			rec.Release()
		}
	}
	clear(recs[len(out):])
	return out
}

func release(recs []arrow.RecordBatch) {
	for _, rec := range recs {
		if rec != nil {
			rec.Release()
		}
	}
}

// Ranges is the number of ranged GETs the stream makes when read to the
// end, for request accounting.
func (r *Records) Ranges() int { return r.spans }

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
			if r.next < len(f.recs) {
				r.rec, f.recs[r.next] = f.recs[r.next], nil
				r.part = f.parts[r.next]
				r.next++
				return true
			}
			if len(f.lazy) > 0 {
				lf := f.lazy[0]
				f.lazy = f.lazy[1:]
				f.recs, f.parts, r.next = nil, nil, 0
				if lf.err == nil {
					f.recs, lf.err = decodeChecked(r.stage, lf.sf, lf.b, lf.checked)
				}
				if lf.err != nil {
					f.err, f.lazy = lf.err, nil
				}
				for range f.recs {
					f.parts = append(f.parts, lf.sf.Frame.Partition)
				}
				continue
			}
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
		r.cur, r.next = f, 0
		select {
		case <-f.done:
		case <-r.ctx.Done():
			r.stop(context.Cause(r.ctx))
			return false
		}
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
	if r.cur != nil {
		release(r.cur.recs)
		r.cur = nil
	}
	for f := range r.slots {
		release(f.recs)
	}
}
