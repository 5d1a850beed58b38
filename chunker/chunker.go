package chunker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// Sentinel errors.
var (
	ErrPartition = errors.New("partition out of range")
	ErrSchema    = errors.New("schema differs from the writer's schema")
	ErrClosed    = errors.New("writer is closed")
	// ErrBudget: the options cannot fit the coalesce budget.
	ErrBudget = errors.New("coalesce budget too small")
)

// Sink receives the object byte stream as chunks. Implementations must be
// safe for use from the chunker's single appending goroutine.
type Sink interface {
	// Acquire returns an empty buffer with capacity of the chunk size,
	// blocking while the memory budget is spent.
	Acquire(ctx context.Context) ([]byte, error)
	// Release returns a buffer that will not be emitted.
	Release(buf []byte)
	// Emit hands over chunk number part (1-based) of object obj (0-based);
	// last marks the object's final chunk. Ownership of buf passes.
	Emit(obj int, part int32, buf []byte, last bool) error
}

// StreamSink is a Sink whose chunks may start uploading while they fill.
// When Streaming reports true, every chunk is announced with Begin when
// its buffer comes from Acquire, each append to it with Grow, and it ends
// with Emit as usual (or Release, if the writer gives up).
type StreamSink interface {
	Sink
	// Streaming reports whether the sink wants Begin and Grow.
	Streaming() bool
	// Begin says buf (from Acquire, empty) starts filling as chunk part
	// (1-based) of object obj.
	Begin(obj int, part int32, buf []byte) error
	// Grow says the chunk begun last now holds n bytes.
	Grow(n int)
	// Prepare says object obj will take more than one small put: the
	// writer has taken in PrepareAfter chunks' worth of input. The sink
	// may create its multipart upload now, so that its first chunk can
	// start uploading at its first byte.
	Prepare(obj int)
}

// PrepareAfter is how many chunk sizes of input (logical bytes) a
// streaming writer takes in before it calls StreamSink.Prepare: with LZ4
// on typical rows that is about one chunk of output, so an output that
// stays one PutObject is rarely prepared.
const PrepareAfter = 2

// Options configure a Writer.
type Options struct {
	Schema           *arrow.Schema // nil: the first record's schema
	Partitions       int
	FrameTargetBytes int64
	CoalesceBudget   int64
	Encoders         int
	Compression      string
	ChunkSize        int64
	MaxObjectSize    int64 // 0: only the part limit
	Mem              memory.Allocator
}

// Result is what a closed Writer produced, in the manifest's own terms:
// its frames and objects are those of the worker manifest, less what the
// chunker cannot know (an object's key, a frame's worker index).
type Result struct {
	Schema  *arrow.Schema
	Frames  []manifest.Frame  // in stream order
	Objects []manifest.Object // Size, Parts and CRC32C; Key is the writer's
	Rows    int64
	Bytes   int64 // uncompressed Arrow bytes
	Runs    int   // sorted runs flushed (the last at Close)
	// Codecs counts frames by the codec in their headers ("lz4", "zstd",
	// "none"): with compression auto, the mix the writer chose.
	Codecs map[string]int
}

// item is a piece of a partition's frame, in write order: a batch the
// writer retains, or rows [lo, hi) of segment seg of the run's arena.
type item struct {
	rec    arrow.RecordBatch
	seg    int
	lo, hi int64
}

// arenaSegment is the bytes after which the arena starts a new segment:
// a segment grows (copying its buffers as Go grows a slice) only up to
// this, and the next one starts with the capacity the last one reached,
// so rows are copied into the arena once, not again at every growth.
const arenaSegment = 1 << 20

// runArena is a run's arena, shared by the frames of the run: the last
// of them to be encoded releases it.
// Its memory is counted in the writer's pending bytes until then, as a
// whole: a frame's share cannot be given back while the other frames of
// the run still need the segments.
type runArena struct {
	w    *Writer
	segs []arrow.RecordBatch
	held int64
	refs atomic.Int64
}

func (a *runArena) release() {
	if a.refs.Add(-1) == 0 {
		a.w.mu.Lock()
		a.freeLocked()
		a.w.mu.Unlock()
	}
}

// releaseLocked is release with the writer's lock held.
func (a *runArena) releaseLocked() {
	if a.refs.Add(-1) == 0 {
		a.freeLocked()
	}
}

func (a *runArena) freeLocked() {
	for _, s := range a.segs {
		if s != nil {
			s.Release()
		}
	}
	a.w.pending -= a.held
	a.w.room.Broadcast()
}

// pframe is a frame being filled or waiting for its run.
type pframe struct {
	items []item
	bytes int64 // logical: what frame_target_bytes counts
	arena int64 // logical bytes of its arena rows
	held  int64 // memory of its retained batches and items
}

// pbuf is one partition's buffered rows since the last run: complete
// frames, then the open one.
type pbuf struct {
	done []pframe
	open pframe
}

// pbufSize is what one partition's state costs whatever it holds: its
// pbuf, counted against coalesce_budget from the start.
const pbufSize = int64(unsafe.Sizeof(pbuf{}))

// itemSize is what each item costs in its frame's list.
const itemSize = int64(unsafe.Sizeof(item{}))

// entrySize is what each frame's index entry costs until Close (the
// index is counted by its slice's capacity).
const entrySize = int64(unsafe.Sizeof(manifest.Frame{}))

type encodeJob struct {
	seq       int64
	partition int
	items     []item    // the frame's rows in write order
	arena     *runArena // the arena its ranges are of, or nil
	held      int64     // counted in pending until the frame is appended
}

// release drops the job's references.
func (j *encodeJob) release() {
	for _, it := range j.items {
		if it.rec != nil {
			it.rec.Release()
		}
	}
	if j.arena != nil {
		j.arena.release()
	}
}

type encoded struct {
	seq       int64
	partition int
	held      int64
	buf       *bytes.Buffer
	stats     frame.Stats
	err       error
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Writer is the chunker for one worker attempt. Write is safe for many
// goroutines at once; Close and Abort are called once, after the last Write.
//
// Rows are buffered per partition until the buffers fill coalesce_budget;
// then every partition's rows are flushed at once, in partition order, as
// a sorted run (Spark's sort-based shuffle spills the same way), so the
// frames of neighbouring partitions lie next to each other in the object
// and a reader of a partition range fetches each run's part in one GET. A
// partition's rows in a run are cut into frames of about
// frame_target_bytes; a frame that fills with large batches alone does not
// wait for the run. Small batches are copied into the run's arena, one
// dense batch for every partition, so that many partitions of a few rows
// each cost their rows, not a retained batch per write; batches of a
// quarter frame or more are retained as they are.
type Writer struct {
	opt    Options
	sink   Sink
	stream StreamSink // the sink, when it streams chunks as they fill
	auto   *autoCodec // compression auto: picks each frame's codec
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	room     *sync.Cond // pending fell or the writer failed
	work     *sync.Cond // a job was queued or the queue closed
	schema   *arrow.Schema
	parts    []pbuf
	arena    []*frame.Accumulator // the run's arena, in segments; the last one grows
	arenaOK  bool                 // the schema's types are copied
	arenaLog int64                // logical bytes in the arena
	buffered int64                // bytes held by the partitions' buffers and the arena
	pending  int64                // bytes held by flushed frames not yet appended
	fixed    int64                // per-partition state and index entries
	seq      int64
	runs     int
	closed   bool
	taken    int64 // logical bytes written so far
	prepared bool  // StreamSink.Prepare was called
	queue    []encodeJob
	qclosed  bool

	results chan encoded
	encWG   sync.WaitGroup
	appDone chan struct{}

	// appender state, owned by the appender goroutine
	cur     []byte
	obj     int
	part    int32
	objOff  int64
	objCRC  uint32
	objects []manifest.Object
	frames  []manifest.Frame
	// indexCap is cap(frames) as counted in fixed (under mu).
	indexCap int64
	rows     int64
	bytes    int64
	codecs   map[string]int // frames per codec (from their headers)
}

// New starts a Writer emitting chunks to sink. ctx cancels it. It fails
// when the partitions' fixed state alone would take more than half of
// the coalesce budget.
func New(ctx context.Context, opt Options, sink Sink) (*Writer, error) {
	if opt.Partitions < 1 {
		return nil, fmt.Errorf("partitions must be at least 1, got %d", opt.Partitions)
	}
	if opt.ChunkSize < 1 {
		return nil, fmt.Errorf("chunk size must be positive, got %d", opt.ChunkSize)
	}
	if opt.Encoders < 1 {
		opt.Encoders = 1
	}
	if opt.Mem == nil {
		opt.Mem = memory.DefaultAllocator
	}
	if opt.FrameTargetBytes < 1 {
		opt.FrameTargetBytes = 1 << 20
	}
	if opt.CoalesceBudget < opt.FrameTargetBytes {
		opt.CoalesceBudget = opt.FrameTargetBytes
	}
	if fixed := int64(opt.Partitions) * pbufSize; fixed > opt.CoalesceBudget/2 {
		return nil, fmt.Errorf("%w: %d partitions take %d bytes of state (%d each), more than half of coalesce_budget (%d bytes): raise coalesce_budget to at least %d bytes or use fewer partitions",
			ErrBudget, opt.Partitions, fixed, pbufSize, opt.CoalesceBudget, 2*fixed)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	w := &Writer{
		opt:     opt,
		sink:    sink,
		ctx:     cctx,
		cancel:  cancel,
		parts:   make([]pbuf, opt.Partitions),
		fixed:   int64(opt.Partitions) * pbufSize,
		results: make(chan encoded, opt.Encoders),
		appDone: make(chan struct{}),
	}
	// An object that cannot have a second part (max_object_size at most
	// a chunk) is never streamed: it stays one PutObject.
	if ss, ok := sink.(StreamSink); ok && ss.Streaming() && w.maxObject() > opt.ChunkSize {
		w.stream = ss
	}
	if opt.Compression == frame.Auto {
		w.auto = newAutoCodec(opt.Encoders)
	}
	w.room = sync.NewCond(&w.mu)
	w.work = sync.NewCond(&w.mu)
	if opt.Schema != nil {
		w.setSchemaLocked(opt.Schema)
	}
	context.AfterFunc(cctx, func() {
		w.mu.Lock()
		w.room.Broadcast()
		w.mu.Unlock()
	})
	for range opt.Encoders {
		w.encWG.Add(1)
		go w.encoder()
	}
	go func() {
		w.encWG.Wait()
		close(w.results)
	}()
	go w.appender()
	return w, nil
}

func (w *Writer) setSchemaLocked(s *arrow.Schema) {
	w.schema = s
	var seg *frame.Accumulator
	if seg, w.arenaOK = frame.NewAccumulator(s); w.arenaOK {
		w.arena = []*frame.Accumulator{seg}
	}
}

// segment returns the arena's growing segment, starting a new one when it
// is full.
func (w *Writer) segment() (*frame.Accumulator, int) {
	n := len(w.arena) - 1
	if cur := w.arena[n]; cur.Used() >= arenaSegment {
		next := cur.NewLike()
		w.buffered += next.Held()
		w.arena = append(w.arena, next)
		n++
	}
	return w.arena[n], n
}

// Fail cancels the writer with err: blocked and later Writes return it.
func (w *Writer) Fail(err error) { w.cancel(err) }

// Err returns the error that cancelled the writer, if any.
func (w *Writer) Err() error {
	if w.ctx.Err() != nil {
		return context.Cause(w.ctx)
	}
	return nil
}

// Write adds rec's rows to partition. The writer keeps what it needs of
// rec (a copy, or a reference); the caller may release it when Write
// returns. Write blocks while the flushed frames still being encoded and
// appended take the budget, and returns the writer's first failure at
// once.
func (w *Writer) Write(partition int, rec arrow.RecordBatch) error {
	if err := w.Err(); err != nil {
		return err
	}
	if partition < 0 || partition >= w.opt.Partitions {
		return fmt.Errorf("%w: partition %d, writer has partitions [0, %d)", ErrPartition, partition, w.opt.Partitions)
	}
	if rec.NumRows() == 0 {
		return nil
	}
	size := frame.LogicalSize(rec)
	w.mu.Lock()
	err := w.writeLocked(partition, rec, size)
	prepare := err == nil && w.stream != nil && !w.prepared && w.taken >= PrepareAfter*w.opt.ChunkSize
	if prepare {
		w.prepared = true
	}
	w.mu.Unlock()
	if prepare {
		w.stream.Prepare(0)
	}
	return err
}

// writeLocked is Write with the lock held.
func (w *Writer) writeLocked(partition int, rec arrow.RecordBatch, size int64) error {
	if w.closed {
		return ErrClosed
	}
	if w.schema == nil {
		w.setSchemaLocked(rec.Schema())
	} else if w.schema != rec.Schema() && !w.schema.Equal(rec.Schema()) {
		return fmt.Errorf("%w: partition %d got %s, want %s", ErrSchema, partition, rec.Schema(), w.schema)
	}
	w.taken += size
	// A batch larger than a frame is cut into frame-sized slices, so a
	// reader never needs more than a frame's bytes to decode one.
	if size > w.opt.FrameTargetBytes && rec.NumRows() > 1 {
		perByte := heldPerLogical(rec)
		n := rec.NumRows()
		step := max(1, (n*w.opt.FrameTargetBytes+size-1)/size)
		for lo := int64(0); lo < n; lo += step {
			s := rec.NewSlice(lo, min(lo+step, n))
			err := w.addLocked(partition, s, frame.LogicalSize(s), perByte)
			s.Release()
			if err != nil {
				return err
			}
		}
		return nil
	}
	return w.addLocked(partition, rec, size, 0)
}

// addLocked buffers rec (size logical bytes) in partition, once the
// budget has room. perByte is the held bytes per logical byte of rec if
// the caller knows it (0: measure).
func (w *Writer) addLocked(partition int, rec arrow.RecordBatch, size int64, perByte float64) error {
	for w.buffered+w.pending+w.fixed+w.arenaGrowth() > w.opt.CoalesceBudget && w.pending > 0 {
		if err := w.Err(); err != nil {
			return err
		}
		w.room.Wait()
	}
	if err := w.Err(); err != nil {
		return err
	}
	p := &w.parts[partition]
	f := &p.open
	n := rec.NumRows()
	copied := false
	if w.arenaOK && size < w.opt.FrameTargetBytes/4 {
		seg, si := w.segment()
		before := seg.Held()
		lo := seg.Rows()
		if seg.Append(rec) == nil {
			copied = true
			w.buffered += seg.Held() - before
			w.arenaLog += size
			f.arena += size
			if k := len(f.items); k > 0 && f.items[k-1].rec == nil && f.items[k-1].seg == si && f.items[k-1].hi == lo {
				f.items[k-1].hi = lo + n // the partition's last write is contiguous
			} else {
				f.items = append(f.items, item{seg: si, lo: lo, hi: lo + n})
				f.held += itemSize
				w.buffered += itemSize
			}
		}
	}
	if !copied {
		if perByte == 0 {
			perByte = heldPerLogical(rec)
		}
		rec.Retain()
		h := int64(float64(size)*perByte) + objectsHeld(rec) + itemSize
		f.items = append(f.items, item{rec: rec})
		f.held += h
		w.buffered += h
	}
	f.bytes += size
	if f.bytes >= w.opt.FrameTargetBytes {
		if f.arena == 0 {
			// A full frame of retained batches needs nothing from the
			// run: it is encoded and uploaded now, while input still
			// arrives (a frame of a full frame_target_bytes costs a GET
			// of its own well spent).
			w.queue = append(w.queue, encodeJob{seq: w.seq, partition: partition, items: f.items, held: f.held})
			w.seq++
			w.buffered -= f.held
			w.pending += f.held
			w.work.Signal()
		} else {
			p.done = append(p.done, *f)
		}
		*f = pframe{}
	}
	// The arena's next growth (Go grows a large slice by a quarter) must
	// fit too, or the run flushes now.
	if w.buffered+w.fixed+w.arenaGrowth() >= w.opt.CoalesceBudget {
		w.runLocked()
	}
	return nil
}

func (w *Writer) arenaGrowth() int64 {
	if len(w.arena) == 0 {
		return 0
	}
	return w.arena[len(w.arena)-1].Held() / 4
}

// finishArenaLocked ends the run's arena: its segments as batches, and a
// fresh first segment shaped like the last one.
func (w *Writer) finishArenaLocked() (*runArena, int64) {
	if len(w.arena) == 0 || w.arena[0].Rows() == 0 {
		return nil, 0
	}
	ra := &runArena{w: w}
	for _, seg := range w.arena {
		ra.held += seg.Held()
		// Index for index with the segments items name (nil: no rows).
		ra.segs = append(ra.segs, seg.Finish())
	}
	last := w.arena[len(w.arena)-1]
	w.arena = []*frame.Accumulator{last}
	ra.refs.Store(1) // the run's own, dropped once every job took one
	w.pending += ra.held
	return ra, ra.held
}

// runLocked flushes every partition's frames, in partition order, to the
// encoders: one sorted run.
func (w *Writer) runLocked() {
	arena, _ := w.finishArenaLocked()
	if arena != nil {
		defer arena.releaseLocked()
	}
	var held int64
	for i := range w.parts {
		p := &w.parts[i]
		if len(p.open.items) > 0 {
			p.done = append(p.done, p.open)
		}
		for _, f := range p.done {
			j := encodeJob{seq: w.seq, partition: i, held: f.held, items: f.items}
			if f.arena > 0 {
				arena.refs.Add(1)
				j.arena = arena
			}
			w.seq++
			held += j.held
			w.queue = append(w.queue, j)
		}
		*p = pbuf{}
	}
	w.pending += held
	w.buffered, w.arenaLog = 0, 0
	w.runs++
	w.work.Broadcast()
}

// next takes the next job off the queue, waiting for one; false once the
// queue is closed and empty.
func (w *Writer) next() (encodeJob, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 && !w.qclosed {
		w.work.Wait()
	}
	if len(w.queue) == 0 {
		return encodeJob{}, false
	}
	j := w.queue[0]
	w.queue[0] = encodeJob{}
	w.queue = w.queue[1:]
	if len(w.queue) == 0 {
		w.queue = nil
	}
	return j, true
}

func (w *Writer) encoder() {
	defer w.encWG.Done()
	mem := &reuseAllocator{parent: w.opt.Mem}
	defer mem.release()
	var (
		enc    *frame.Encoder
		gather *frame.Accumulator // the frame's rows, gathered from the arena and its batches
	)
	defer func() {
		if enc != nil {
			enc.Close()
		}
	}()
	for {
		j, ok := w.next()
		if !ok {
			return
		}
		res := encoded{seq: j.seq, partition: j.partition, held: j.held}
		if w.ctx.Err() == nil {
			if enc == nil {
				w.mu.Lock()
				schema := w.schema
				w.mu.Unlock()
				enc, res.err = frame.NewEncoder(schema, w.opt.Compression, mem)
				gather, _ = frame.NewAccumulator(schema)
			}
			var codec string
			if res.err == nil && w.auto != nil {
				codec = w.auto.codec()
				res.err = enc.SetCodec(codec)
			}
			if res.err == nil {
				res.buf = bufPool.Get().(*bytes.Buffer)
				res.buf.Reset()
				start := time.Now()
				res.stats, res.err = encodeItems(enc, gather, res.buf, j)
				if w.auto != nil && res.err == nil {
					w.auto.encoded(codec, res.buf.Len(), time.Since(start))
				}
			}
			if res.err != nil {
				res.err = fmt.Errorf("partition %d: %w", j.partition, res.err)
			}
		}
		j.release()
		w.results <- res
	}
}

// encodeItems encodes one frame of j's rows into buf. A frame of one
// batch is encoded as it is; otherwise its rows are gathered (copied,
// once) into one batch, the arena's ranges and its batches in order.
// Without a gatherer (a schema the Accumulator does not copy), the
// batches are encoded together, which concatenates them.
func encodeItems(enc *frame.Encoder, gather *frame.Accumulator, buf *bytes.Buffer, j encodeJob) (frame.Stats, error) {
	if len(j.items) == 1 && j.items[0].rec != nil {
		return enc.Encode(buf, []arrow.RecordBatch{j.items[0].rec})
	}
	if gather == nil {
		recs := make([]arrow.RecordBatch, len(j.items))
		for i, it := range j.items {
			recs[i] = it.rec
		}
		return enc.Encode(buf, recs)
	}
	gather.Reset()
	for _, it := range j.items {
		var err error
		if it.rec != nil {
			err = gather.Append(it.rec)
		} else {
			err = gather.AppendRange(j.arena.segs[it.seg], it.lo, it.hi-it.lo)
		}
		if err != nil {
			return frame.Stats{}, err
		}
	}
	rec := gather.View()
	defer rec.Release()
	return enc.Encode(buf, []arrow.RecordBatch{rec})
}

// appender puts encoded frames into the byte stream in submission order,
// and gives their budget back once they are in.
func (w *Writer) appender() {
	defer close(w.appDone)
	pending := map[int64]encoded{}
	var next int64
	for res := range w.results {
		pending[res.seq] = res
		for {
			r, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if r.err != nil {
				w.cancel(r.err)
			}
			if r.buf != nil {
				if w.ctx.Err() == nil {
					if err := w.appendFrame(r); err != nil {
						w.cancel(err)
					}
				}
				bufPool.Put(r.buf)
			}
			w.mu.Lock()
			w.pending -= r.held
			w.countIndexLocked()
			w.room.Broadcast()
			w.mu.Unlock()
		}
	}
}

// countIndexLocked counts the frame index (the capacity of its slice,
// kept until Close) in fixed, and fails the writer with ErrBudget once
// the index and the partitions' state leave less than an eighth of
// coalesce_budget (at least a frame) for rows: the room for rows is what
// a run holds, and below that runs would shrink toward a few rows each,
// every frame a few rows and an index entry of its own. The index grows
// by about one entry per partition per run, so the input a writer can
// take grows with the square of the budget.
func (w *Writer) countIndexLocked() {
	c := int64(cap(w.frames))
	if c == w.indexCap {
		return
	}
	w.fixed += (c - w.indexCap) * entrySize
	w.indexCap = c
	if room, least := w.opt.CoalesceBudget-w.fixed, w.leastRoom(); room < least && w.ctx.Err() == nil {
		state := int64(w.opt.Partitions) * pbufSize
		w.cancel(fmt.Errorf("%w: after %d frames (%d bytes of input) the writer's frame index takes %d bytes (%d per frame, kept until Close) and its %d partitions' state %d bytes, leaving %d bytes of coalesce_budget (%d bytes) for rows, less than %d; past that every run would hold only a few rows. The index grows by about one frame per partition per run: raise coalesce_budget (doubling it lets a writer take about four times the input) or spread the output over more workers",
			ErrBudget, len(w.frames), w.bytes, c*entrySize, entrySize, w.opt.Partitions, state, max(room, 0), w.opt.CoalesceBudget, least))
	}
}

// leastRoom is the room for rows a writer keeps within coalesce_budget:
// an eighth of it, at least a frame.
func (w *Writer) leastRoom() int64 {
	return max(w.opt.CoalesceBudget/8, min(w.opt.FrameTargetBytes, w.opt.CoalesceBudget/2))
}

// OnFail calls f with the cause once the writer fails or is aborted (not
// when it closes normally).
func (w *Writer) OnFail(f func(error)) {
	context.AfterFunc(w.ctx, func() {
		if err := context.Cause(w.ctx); !errors.Is(err, ErrClosed) {
			f(err)
		}
	})
}

func (w *Writer) maxObject() int64 {
	limit := w.opt.ChunkSize * store.MaxParts
	if w.opt.MaxObjectSize > 0 && w.opt.MaxObjectSize < limit {
		limit = w.opt.MaxObjectSize
	}
	return limit
}

func (w *Writer) appendFrame(r encoded) error {
	b := r.buf.Bytes()
	if w.objOff > 0 && w.objOff+int64(len(b)) > w.maxObject() {
		if err := w.endObject(); err != nil {
			return err
		}
	}
	w.frames = append(w.frames, manifest.Frame{
		Partition: r.partition,
		Object:    w.obj,
		Offset:    w.objOff,
		Length:    int64(len(b)),
		Rows:      r.stats.Rows,
		Bytes:     r.stats.Bytes,
		CRC32C:    store.CRC32C(b),
	})
	w.rows += r.stats.Rows
	w.bytes += r.stats.Bytes
	if w.codecs == nil {
		w.codecs = map[string]int{}
	}
	w.codecs[frame.CodecName(b)]++
	var waited time.Duration
	w.objCRC = store.UpdateCRC32C(w.objCRC, b)
	w.objOff += int64(len(b))
	for len(b) > 0 {
		if w.cur != nil && int64(len(w.cur)) == w.opt.ChunkSize {
			// More bytes follow, so the full chunk is not the last one.
			w.part++
			if w.part > store.MaxParts {
				return fmt.Errorf("object %d: more than %d parts of %d bytes", w.obj, store.MaxParts, w.opt.ChunkSize)
			}
			if err := w.sink.Emit(w.obj, w.part, w.cur, false); err != nil {
				w.cur = nil
				return err
			}
			w.cur = nil
		}
		if w.cur == nil {
			start := time.Now()
			buf, err := w.sink.Acquire(w.ctx)
			waited += time.Since(start)
			if err != nil {
				return err
			}
			if w.stream != nil {
				if err := w.stream.Begin(w.obj, w.part+1, buf); err != nil {
					return err // the sink has the buffer
				}
			}
			w.cur = buf
		}
		n := min(int64(len(b)), w.opt.ChunkSize-int64(len(w.cur)))
		w.cur = append(w.cur, b[:n]...)
		b = b[n:]
		if w.stream != nil {
			w.stream.Grow(len(w.cur))
		}
	}
	if w.auto != nil {
		w.auto.appended(int(r.buf.Len()), waited)
	}
	return nil
}

// endObject emits the current object's last chunk and starts the next.
func (w *Writer) endObject() error {
	if w.cur == nil {
		return nil
	}
	w.part++
	err := w.sink.Emit(w.obj, w.part, w.cur, true)
	w.cur = nil
	w.objects = append(w.objects, manifest.Object{Size: w.objOff, Parts: int(w.part), CRC32C: w.objCRC})
	w.obj++
	w.part, w.objOff, w.objCRC = 0, 0, 0
	return err
}

// Close flushes the remaining buffers as the last run, waits for the
// encoders and emits the last chunk. The Result indexes every frame.
func (w *Writer) Close() (Result, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return Result{}, ErrClosed
	}
	w.closed = true
	if w.ctx.Err() == nil {
		w.runLocked()
	} else {
		w.dropBuffersLocked()
	}
	w.qclosed = true
	w.work.Broadcast()
	w.mu.Unlock()
	<-w.appDone
	err := w.Err()
	if err == nil {
		err = w.endObject()
	}
	if err != nil {
		w.cancel(err)
		w.dropCurrent()
		return Result{}, err
	}
	w.cancel(ErrClosed)
	return Result{Schema: w.schema, Frames: w.frames, Objects: w.objects, Rows: w.rows, Bytes: w.bytes, Runs: w.runs, Codecs: w.codecs}, nil
}

// Abort cancels the writer with cause and drops every buffer.
func (w *Writer) Abort(cause error) {
	w.cancel(cause)
	w.mu.Lock()
	already := w.closed
	w.closed = true
	w.dropBuffersLocked()
	w.qclosed = true
	w.work.Broadcast()
	w.mu.Unlock()
	if !already {
		<-w.appDone
		w.dropCurrent()
	}
}

// dropBuffersLocked releases every buffered row.
func (w *Writer) dropBuffersLocked() {
	for i := range w.parts {
		p := &w.parts[i]
		for _, f := range append(p.done, p.open) {
			(&encodeJob{items: f.items}).release()
		}
		*p = pbuf{}
	}
	if arena, _ := w.finishArenaLocked(); arena != nil {
		arena.releaseLocked()
	}
	w.buffered, w.arenaLog = 0, 0
}

func (w *Writer) dropCurrent() {
	if w.cur != nil {
		w.sink.Release(w.cur)
		w.cur = nil
	}
}
