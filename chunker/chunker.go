package chunker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/arrowcheck"
	"github.com/durashuffle/durashuffle/internal/entry"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// The errors a Writer returns wrap one of these; test with errors.Is.
var (
	// ErrPartition: Write was given a partition outside [0,
	// Options.Partitions). Nothing of the batch was taken.
	ErrPartition = errors.New("partition out of range")
	// ErrSchema: Write was given a batch whose schema differs from the
	// writer's (Options.Schema, or the first batch's). Nothing of it was
	// taken; the writer keeps what it had.
	ErrSchema = errors.New("schema differs from the writer's schema")
	// ErrBatch: a batch failed validation (validateBatch); none of it
	// was taken.
	ErrBatch = errors.New("invalid record batch")
	// ErrClosed: Write or Close after Close or Abort.
	ErrClosed = errors.New("writer is closed")
	// errBudget: the options cannot fit the coalesce budget (New), or
	// the writer's frame index left too little of it for rows (the
	// writer fails with it).
	errBudget = errors.New("coalesce budget too small")
)

// Sink receives the object byte stream as chunks. A Writer calls its
// methods from one goroutine at a time, never concurrently: its
// appending goroutine while it runs, then the goroutine in Close or
// Abort.
type Sink interface {
	// Acquire returns an empty buffer with capacity of the chunk size,
	// blocking while the memory budget is spent; it returns ctx's error
	// once ctx ends.
	Acquire(ctx context.Context) ([]byte, error)
	// Release returns a buffer from Acquire that will not be emitted.
	Release(buf []byte)
	// Emit hands over chunk number part (1-based) of object obj
	// (0-based); last marks the object's final chunk. Chunks come in
	// order: an object's parts 1, 2, ..., the next object only after
	// its predecessor's last chunk. Every chunk but an object's last
	// holds exactly the chunk size. Ownership of buf passes, whether or
	// not Emit returns an error; an error fails the writer.
	Emit(obj int, part int32, buf []byte, last bool) error
}

// StreamSink is a Sink whose chunks may start uploading while they fill.
// When Streaming reports true, every chunk is announced with Begin when
// its buffer comes from Acquire, each append to it with Grow, and it ends
// with Emit as usual (or Release, if the writer gives up). Begin, Grow
// and Emit come from the Sink's one goroutine at a time; Prepare comes
// from a goroutine in Write, and may run concurrently with them.
type StreamSink interface {
	Sink
	// Streaming reports whether the sink wants Begin and Grow. New asks
	// once.
	Streaming() bool
	// Begin says buf (from Acquire, empty) starts filling as chunk part
	// (1-based) of object obj. On error the sink keeps buf.
	Begin(obj int, part int32, buf []byte) error
	// Grow says the chunk begun last now holds n bytes.
	Grow(n int)
	// Prepare says object obj will take more than one small put: the
	// writer has taken in two chunk sizes of input (logical bytes; with
	// LZ4 on typical rows about one chunk of output, so an output that
	// stays one PutObject is rarely prepared). The sink may create its
	// multipart upload now, so that its first chunk can start uploading
	// at its first byte. Called at most once per writer.
	Prepare(obj int)
}

// prepareAfter is how many chunk sizes of input (logical bytes) a
// streaming writer takes in before it calls StreamSink.Prepare.
const prepareAfter = 2

// DefaultFrameTargetBytes is Options.FrameTargetBytes when it is 0 (and
// frame_target_bytes' default): frames large enough that encoding and a
// frame's header cost little per byte, small enough that a partition's
// rows leave the coalesce budget often.
const DefaultFrameTargetBytes = 1 << 20

// Options configure a Writer. New settles the zero values of the fields
// that have a default.
type Options struct {
	// Schema of every batch; nil: the first batch's.
	Schema *arrow.Schema
	// Partitions is the number of output partitions, at least 1.
	Partitions int
	// FrameTargetBytes is a frame's target size in logical (uncompressed
	// Arrow) bytes; 0: DefaultFrameTargetBytes.
	FrameTargetBytes int64
	// CoalesceBudget bounds the bytes the writer holds: rows buffered,
	// frames flushed and not yet appended, its frame index and
	// per-partition state (a sorted writer's kept frames, until they
	// spill). Write blocks while it is spent. At least FrameTargetBytes.
	CoalesceBudget int64
	// Encoders is the number of goroutines encoding frames; 0: 1.
	Encoders int
	// Compression is each frame's codec (frame.LZ4, frame.Zstd,
	// frame.None, or frame.Auto: chosen per frame by the upload rate);
	// "": none.
	Compression string
	// ChunkSize is the size of every chunk but an object's last, at
	// least 1.
	ChunkSize int64
	// MaxObjectSize bounds an object's bytes: a frame that would pass it
	// starts the next object. 0: only store.MaxParts chunks.
	MaxObjectSize int64
	// Mem allocates the buffers of encoding; nil: memory.DefaultAllocator.
	Mem memory.Allocator
	// Spill, when set, makes the writer sorted: one partition-sorted run
	// per object, its runs kept in memory or spilled here until Close
	// (sorted.go). Nil: each run goes to the object as it flushes, and
	// a reader pays a GET per run.
	Spill *spill.Dir
	// Seal, when set, encrypts every frame the writer makes, and every
	// piece it spills, before it leaves the encoder (frame.Sealer): no
	// plaintext row reaches an object or the spill file.
	Seal *frame.Sealer
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
		o.FrameTargetBytes = DefaultFrameTargetBytes
	}
	if o.CoalesceBudget < o.FrameTargetBytes {
		o.CoalesceBudget = o.FrameTargetBytes
	}
	if fixed := int64(o.Partitions) * pbufSize; fixed > o.CoalesceBudget/2 {
		return o, fmt.Errorf("%w: %d partitions take %d bytes of state (%d each), more than half of coalesce_budget (%d bytes): raise coalesce_budget to at least %d bytes or use fewer partitions",
			errBudget, o.Partitions, fixed, pbufSize, o.CoalesceBudget, 2*fixed)
	}
	return o, nil
}

// maxObject is the most bytes an object of o may take.
func (o Options) maxObject() int64 {
	limit := o.ChunkSize * store.MaxParts
	if o.MaxObjectSize > 0 && o.MaxObjectSize < limit {
		limit = o.MaxObjectSize
	}
	return limit
}

// Result is what a closed Writer produced, in the manifest's own terms:
// its frames and objects are those of the worker manifest, less what the
// chunker cannot know (an object's key, a frame's worker index). It is
// the caller's: the writer keeps no reference to it.
type Result struct {
	// Schema is the writer's schema: Options.Schema, or the first
	// batch's; nil if neither was ever given.
	Schema *arrow.Schema
	// Frames index every frame in stream order: by object, then offset.
	Frames []entry.Frame
	// Objects are the objects emitted, in order: Size, CRC32C, and Parts
	// as the chunks emitted (the uploader may cut otherwise); Key is the
	// caller's to fill in.
	Objects []entry.Object
	// Rows and Bytes (uncompressed Arrow bytes) are those of every
	// frame.
	Rows  int64
	Bytes int64
	// Runs is the sorted runs flushed, the last at Close.
	Runs int
	// spilled is the bytes a sorted writer wrote to its spill (0: its
	// runs fit in memory, or the writer is not sorted). A sorted
	// writer's object holds one run however many it flushed.
	spilled int64
	// Codecs counts frames by the codec in their headers ("lz4", "zstd",
	// "none"): with compression auto, the mix the writer chose.
	Codecs map[string]int
}

// Writer is the chunker for one worker attempt. Write is safe for many
// goroutines at once; Close or Abort is called after the last Write
// returned, and either ends the writer (a second call returns ErrClosed
// or does nothing). Fail and OnFail are safe at any time.
//
// Rows are buffered per partition until the buffers fill coalesce_budget;
// then every partition's rows are flushed at once, in partition order, as
// a sorted run (Spark's sort-based shuffle spills the same way), so the
// frames of neighbouring partitions lie next to each other in the object
// and a reader of a partition range fetches each run's part in one GET. A
// partition's rows in a run are cut into frames of about
// frame_target_bytes; a frame that fills with retained batches alone does
// not wait for the run. A small batch whose retention would hold more
// than 1.5 times its bytes (a few rows, whose arrays' Go objects outweigh
// them, or a slice of a batch with much spare capacity) is copied into
// the run's arena, one dense batch for every partition, so that many
// partitions of a few rows each cost their rows, not a retained batch per
// write; other batches are retained as they are (copiedUnder, retains).
// WritePartitioned and WriteKeyed take a whole batch whose rows go to many
// partitions and gather each partition's rows into the arena themselves
// (scatter.go), where a slice per partition would cost its Go objects.
//
// A Writer is four parts, each owning its state: the coalescer (the rows
// Write buffers, coalesce.go), guarded with the budget (budget.go) by the
// budget's lock; the job queue the coalescer flushes frames to
// (encode.go), with a lock of its own; the encoders, one goroutine and one
// encoder value each; and the appender (append.go), one goroutine that
// alone holds the object's byte stream, its index and a sorted writer's
// kept frames (sorted.go), and hands them to Close or Abort when it ends.
type Writer struct {
	opt    Options // settled; read-only
	ctx    context.Context
	cancel context.CancelCauseFunc
	stream StreamSink // the sink when it streams chunks, for Prepare

	b  *budget    // the bytes counted against coalesce_budget; its lock guards co too
	co *coalescer // Write's, under b.mu
	q  *jobQueue  // the flushed frames, to the encoders

	// done carries the appender's state once its goroutine has ended:
	// received once, by Close or Abort, which then own it.
	done chan *appender
}

// New starts a Writer emitting chunks to sink. ctx cancels it. It fails
// when the partitions' fixed state alone would take more than half of
// the coalesce budget. The writer's goroutines run until Close or Abort.
func New(ctx context.Context, opt Options, sink Sink) (*Writer, error) {
	opt, err := opt.settle()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	var stream StreamSink
	// An object that cannot have a second part (max_object_size at most
	// a chunk) is never streamed: it stays one PutObject.
	if ss, ok := sink.(StreamSink); ok && ss.Streaming() && opt.maxObject() > opt.ChunkSize {
		stream = ss
	}
	var auto *autoCodec
	codec := opt.Compression // every frame's codec, but a raw one's; "" with auto
	switch opt.Compression {
	case frame.Auto:
		auto, codec = newAutoCodec(opt.Encoders), ""
	case "":
		codec = frame.None
	}
	b := newBudget(opt)
	q := newJobQueue(cctx, int64(2*opt.Encoders+2))
	co := &coalescer{
		ctx: cctx, cancel: cancel, b: b, q: q,
		partitions: opt.Partitions, frameTarget: opt.FrameTargetBytes, limit: opt.CoalesceBudget,
		sorted: opt.Spill != nil, compresses: codec != frame.None,
		parts: make([]pbuf, opt.Partitions),
	}
	if stream != nil {
		co.prepareAt = prepareAfter * opt.ChunkSize
	}
	if opt.Schema != nil {
		co.setSchema(opt.Schema)
	}
	w := &Writer{opt: opt, ctx: cctx, cancel: cancel, stream: stream, b: b, co: co, q: q, done: make(chan *appender, 1)}
	context.AfterFunc(cctx, func() {
		b.wake()
		q.wake()
	})
	w.start(sink, codec, auto)
	return w, nil
}

// start starts the encoders and the appender, each with state of its
// own that the Writer does not hold: the appender's comes back on done.
func (w *Writer) start(sink Sink, codec string, auto *autoCodec) {
	opt := w.opt
	results := make(chan encoded, opt.Encoders)
	var encoders sync.WaitGroup
	for range opt.Encoders {
		e := &encoder{ctx: w.ctx, q: w.q, results: results, compression: opt.Compression, codec: codec, auto: auto,
			parent: opt.Mem, mem: &reuseAllocator{parent: opt.Mem}, seal: opt.Seal}
		encoders.Go(e.run)
	}
	go func() {
		encoders.Wait()
		close(results)
	}()
	a := &appender{ctx: w.ctx, cancel: w.cancel, b: w.b, q: w.q, sink: sink, stream: w.stream, auto: auto,
		chunk: opt.ChunkSize, maxObject: opt.maxObject(), partitions: opt.Partitions, frameTarget: opt.FrameTargetBytes}
	if opt.Spill != nil {
		a.keep = &keeper{b: w.b, file: opt.Spill.Create()}
		if fs, ok := sink.(FileSink); ok {
			a.files, a.spillDir = fs, opt.Spill
			a.maxFileObject = opt.MaxObjectSize
			if a.maxFileObject <= 0 {
				a.maxFileObject = math.MaxInt64
			}
		}
	}
	go a.run(results, w.done)
}

// Fail cancels the writer with err: blocked and later Writes return it,
// and Close fails with it. Safe at any time, from any goroutine; the
// first failure wins.
func (w *Writer) Fail(err error) { w.cancel(err) }

// err returns the error that cancelled the writer, if any.
func (w *Writer) err() error {
	if w.ctx.Err() != nil {
		return context.Cause(w.ctx)
	}
	return nil
}

// Write adds rec's rows to partition. The writer keeps what it needs of
// rec (a copy, or a reference it releases itself); the caller keeps its
// own reference and may release it when Write returns. Write blocks while
// the flushed frames still being encoded and appended take the budget,
// and returns the writer's first failure at once.
//
// Every batch is validated first (validateBatch: at least one column,
// Arrow's full validation of each); an invalid one is refused with an
// error wrapping ErrBatch that names the partition and the column, and
// the writer keeps what it had, as for a batch of another schema
// (ErrSchema). A panic inside Write fails the writer with a *safe.PanicError
// and never leaves its lock held, so Abort and Close still run.
func (w *Writer) Write(partition int, rec arrow.RecordBatch) error {
	if err := w.err(); err != nil {
		return err
	}
	if partition < 0 || partition >= w.opt.Partitions {
		return fmt.Errorf("%w: partition %d, writer has partitions [0, %d)", ErrPartition, partition, w.opt.Partitions)
	}
	if err := validateBatch(rec); err != nil {
		return fmt.Errorf("batch for partition %d: %w", partition, err)
	}
	return w.writeValid(partition, rec)
}

// writeValid takes the rows of rec, validated, into partition.
func (w *Writer) writeValid(partition int, rec arrow.RecordBatch) error {
	if rec.NumRows() == 0 {
		return nil
	}
	// Null and run-end encoded arrays without their (absent) validity
	// buffer get one, so that every copy below sees Arrow's layout.
	if nrec, changed := arrowcheck.NormalizeBatch(rec); changed {
		defer nrec.Release()
		rec = nrec
	}
	return w.prepareIf(w.writeGuarded(partition, rec, frame.LogicalSize(rec)))
}

// prepareIf prepares the stream sink if a guarded call said it is due,
// and returns the call's error.
func (w *Writer) prepareIf(prepare bool, err error) error {
	if prepare {
		w.stream.Prepare(0)
	}
	return err
}

// writeGuarded runs the coalescer's write under the lock, and reports
// whether the stream sink is to be prepared.
func (w *Writer) writeGuarded(partition int, rec arrow.RecordBatch, size int64) (prepare bool, err error) {
	return w.guarded(func() string { return fmt.Sprintf("write of %d rows to partition %d", rec.NumRows(), partition) },
		func() error { return w.co.write(partition, rec, size) })
}

// guarded runs f under the lock, and reports whether the stream sink is
// to be prepared. A panic is recovered: the lock is released and the
// writer fails with it, what() naming the call.
func (w *Writer) guarded(what func() string, f func() error) (prepare bool, err error) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			perr := safe.Recovered(r, "%s", what())
			// The run's arena may be half-appended: it is dropped, not
			// finished (its memory is Go's), and the writer is failed.
			w.co.arena, w.b.reuse = nil, nil
			w.cancel(perr)
			w.b.room.Broadcast()
			prepare, err = false, perr
		}
	}()
	if err := f(); err != nil {
		return false, err
	}
	return w.co.prepareDue(), nil
}

// OnFail calls f with the cause once the writer fails or is aborted (not
// when it closes normally). f runs on a goroutine of its own.
func (w *Writer) OnFail(f func(error)) {
	context.AfterFunc(w.ctx, func() {
		if err := context.Cause(w.ctx); !errors.Is(err, ErrClosed) {
			f(err)
		}
	})
}

// Close flushes the remaining buffers as the last run, waits for the
// encoders and emits the last chunk. The Result indexes every frame. On
// error nothing more is emitted, the chunk being filled is released to
// the sink and a sorted writer's spill is removed; the caller aborts
// what was emitted.
func (w *Writer) Close() (Result, error) {
	w.b.mu.Lock()
	if w.co.closed {
		w.b.mu.Unlock()
		return Result{}, ErrClosed
	}
	failed := w.ctx.Err() != nil
	if failed {
		w.co.drop()
	} else {
		w.co.last()
	}
	w.b.mu.Unlock()
	if w.opt.Spill != nil && !failed {
		// The appender takes the end of the writing phase in seq order,
		// every frame before it kept: it queues the object's frames in
		// partition order, then closes the queue.
		w.q.push(encodeJob{end: true})
	} else {
		w.q.close()
	}
	a := <-w.done
	err := w.err()
	if err == nil {
		err = a.endObject()
	}
	if a.keep != nil {
		a.keep.drop()
	}
	if err != nil {
		w.cancel(err)
		a.dropCurrent()
		return Result{}, err
	}
	w.cancel(ErrClosed)
	res := Result{Schema: w.co.schema, Frames: a.frames, Objects: a.objects, Rows: a.rows, Bytes: a.bytes, Runs: w.co.runs, Codecs: a.codecs}
	if a.keep != nil {
		res.spilled = a.keep.spilled
	}
	return res, nil
}

// Abort cancels the writer with cause and drops every buffer: rows
// buffered, frames in flight, the chunk being filled (released to the
// sink) and a sorted writer's spill. Unless Close or Abort came first,
// it returns once the writer's goroutines have ended. Chunks already
// emitted are the caller's to abort.
func (w *Writer) Abort(cause error) {
	w.cancel(cause)
	w.b.mu.Lock()
	already := w.co.closed
	w.co.drop()
	w.b.mu.Unlock()
	w.q.close()
	if !already {
		a := <-w.done
		a.dropCurrent()
		if a.keep != nil {
			a.keep.drop()
		}
	}
}
