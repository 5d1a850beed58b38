package chunker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/chunker/frame"
	"github.com/durashuffle/durashuffle/internal/arrowcheck"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/manifest/entry"
	"github.com/durashuffle/durashuffle/store"
)

// Sentinel errors.
var (
	ErrPartition = errors.New("partition out of range")
	ErrSchema    = errors.New("schema differs from the writer's schema")
	// ErrBatch: a batch failed validation (ValidateBatch); none of it
	// was taken.
	ErrBatch  = errors.New("invalid record batch")
	ErrClosed = errors.New("writer is closed")
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
	// Spill, when set, makes the writer sorted: one partition-sorted run
	// per object, its runs kept in memory or spilled here until Close
	// (sorted.go). Nil: each run goes to the object as it flushes, and
	// a reader pays a GET per run.
	Spill *spill.Dir
}

// settle fills in the defaults of o's unset fields and checks what has
// no default: the one place a Writer's options are read before it runs,
// so that every part of the writer sees the same settled values.
func (o Options) settle() (Options, error) {
	if o.Partitions < 1 {
		return o, fmt.Errorf("partitions must be at least 1, got %d", o.Partitions)
	}
	if o.ChunkSize < 1 {
		return o, fmt.Errorf("chunk size must be positive, got %d", o.ChunkSize)
	}
	if o.Encoders < 1 {
		o.Encoders = 1
	}
	if o.Mem == nil {
		o.Mem = memory.DefaultAllocator
	}
	if o.FrameTargetBytes < 1 {
		o.FrameTargetBytes = 1 << 20
	}
	if o.CoalesceBudget < o.FrameTargetBytes {
		o.CoalesceBudget = o.FrameTargetBytes
	}
	if fixed := int64(o.Partitions) * pbufSize; fixed > o.CoalesceBudget/2 {
		return o, fmt.Errorf("%w: %d partitions take %d bytes of state (%d each), more than half of coalesce_budget (%d bytes): raise coalesce_budget to at least %d bytes or use fewer partitions",
			ErrBudget, o.Partitions, fixed, pbufSize, o.CoalesceBudget, 2*fixed)
	}
	return o, nil
}

// Result is what a closed Writer produced, in the manifest's own terms:
// its frames and objects are those of the worker manifest, less what the
// chunker cannot know (an object's key, a frame's worker index).
type Result struct {
	Schema  *arrow.Schema
	Frames  []entry.Frame  // in stream order
	Objects []entry.Object // Size, CRC32C, Parts: chunks emitted (the uploader may cut otherwise); Key is the writer's
	Rows    int64
	Bytes   int64 // uncompressed Arrow bytes
	Runs    int   // sorted runs flushed (the last at Close)
	// Spilled is the bytes a sorted writer wrote to its spill (0: its
	// runs fit in memory, or the writer is not sorted). A sorted
	// writer's object holds one run however many it flushed.
	Spilled int64
	// Codecs counts frames by the codec in their headers ("lz4", "zstd",
	// "none"): with compression auto, the mix the writer chose.
	Codecs map[string]int
}

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
	codec  string     // otherwise every frame's codec, but a raw one's
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	room     *sync.Cond // pending fell or the writer failed
	work     *sync.Cond // a job was queued or the queue closed
	schema   *arrow.Schema
	parts    []pbuf
	arena    *frame.Arena // the run's arena; nil when the schema's types are not copied
	buffered int64        // bytes held by the partitions' buffers and the arena
	pending  int64        // bytes held by flushed frames not yet appended
	fixed    int64        // per-partition state and index entries
	seq      int64        // frames flushed to the encoders so far
	// unflushed is the frames buffered in the partitions, not yet
	// flushed.
	unflushed int64
	// indexCap is the frame index's capacity, counted in fixed: Write
	// reserves it before it flushes the frames it is for, and the
	// appender grows frames (a sorted writer's kept frames) to it.
	indexCap int64
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
	objects []entry.Object
	frames  []entry.Frame

	// A sorted writer's (sorted.go). kept and spilled are the
	// appender's until Close queues the output; the rest are under mu.
	sorted     bool
	spillFile  *spill.File
	kept       []keptFrame
	spilled    int64
	spilling   bool  // a run flushed before Close: kept frames go to disk
	keptMem    int64 // bytes of kept frames in memory, in the budget
	keptInMem  int   // kept frames in memory (the appender's own count)
	outputting bool  // the output frames are queued
	inflight   int   // jobs queued and not yet through the appender
	outNext    int64 // the next seq the appender takes
	rows       int64
	bytes      int64
	codecs     map[string]int // frames per codec (from their headers)
}

// New starts a Writer emitting chunks to sink. ctx cancels it. It fails
// when the partitions' fixed state alone would take more than half of
// the coalesce budget.
func New(ctx context.Context, opt Options, sink Sink) (*Writer, error) {
	opt, err := opt.settle()
	if err != nil {
		return nil, err
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
	switch opt.Compression {
	case frame.Auto:
		w.auto = newAutoCodec(opt.Encoders)
	case "":
		w.codec = frame.None
	default:
		w.codec = opt.Compression
	}
	if opt.Spill != nil {
		w.sorted = true
		w.spillFile = opt.Spill.Create()
	}
	w.room = sync.NewCond(&w.mu)
	w.work = sync.NewCond(&w.mu)
	if opt.Schema != nil {
		w.setSchemaLocked(opt.Schema)
	}
	context.AfterFunc(cctx, func() {
		w.mu.Lock()
		w.room.Broadcast()
		w.work.Broadcast()
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
//
// Every batch is validated first (ValidateBatch: at least one column,
// Arrow's full validation of each); an invalid one is refused with an
// error wrapping ErrBatch that names the partition and the column, and
// the writer keeps what it had, as for a batch of another schema
// (ErrSchema). A panic inside Write fails the writer with a *safe.PanicError
// and never leaves its lock held, so Abort and Close still run.
func (w *Writer) Write(partition int, rec arrow.RecordBatch) error {
	if err := w.Err(); err != nil {
		return err
	}
	if partition < 0 || partition >= w.opt.Partitions {
		return fmt.Errorf("%w: partition %d, writer has partitions [0, %d)", ErrPartition, partition, w.opt.Partitions)
	}
	if err := ValidateBatch(rec); err != nil {
		return fmt.Errorf("batch for partition %d: %w", partition, err)
	}
	if rec.NumRows() == 0 {
		return nil
	}
	// Null and run-end encoded arrays without their (absent) validity
	// buffer get one, so that every copy below sees Arrow's layout.
	if nrec, changed := arrowcheck.NormalizeBatch(rec); changed {
		defer nrec.Release()
		rec = nrec
	}
	size := frame.LogicalSize(rec)
	prepare, err := w.writeGuarded(partition, rec, size)
	if prepare {
		w.stream.Prepare(0)
	}
	return err
}

// writeGuarded runs writeLocked under the lock, and reports whether the
// stream sink is to be prepared. A panic is recovered: the lock is
// released and the writer fails with it.
func (w *Writer) writeGuarded(partition int, rec arrow.RecordBatch, size int64) (prepare bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			perr := safe.Recovered(r, "write of %d rows to partition %d", rec.NumRows(), partition)
			// The run's arena may be half-appended: it is dropped, not
			// finished (its memory is Go's), and the writer is failed.
			w.arena = nil
			w.cancel(perr)
			w.room.Broadcast()
			prepare, err = false, perr
		}
	}()
	err = w.writeLocked(partition, rec, size)
	prepare = err == nil && w.stream != nil && !w.prepared && w.taken >= PrepareAfter*w.opt.ChunkSize
	if prepare {
		w.prepared = true
	}
	return prepare, err
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
		// The last run's frames stay in memory, with no more input to
		// share the budget with.
		w.spilling = false
		w.runLocked()
		if w.sorted {
			// Every frame of the writing phase kept, then the object in
			// partition order.
			for w.inflight > 0 && w.ctx.Err() == nil {
				w.room.Wait()
			}
			if w.ctx.Err() == nil {
				w.queueOutputLocked()
			}
		}
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
	if w.sorted {
		w.dropKept()
	}
	if err != nil {
		w.cancel(err)
		w.dropCurrent()
		return Result{}, err
	}
	w.cancel(ErrClosed)
	return Result{Schema: w.schema, Frames: w.frames, Objects: w.objects, Rows: w.rows, Bytes: w.bytes, Runs: w.runs, Spilled: w.spilled, Codecs: w.codecs}, nil
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
		if w.sorted {
			w.dropKept()
		}
	}
}
