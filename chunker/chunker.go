package chunker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/arrowcheck"
	"github.com/durashuffle/durashuffle/internal/entry"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/spill"
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
	// MaxObjectSize bounds an object's bytes: a frame that would pass it
	// starts the next object. 0: only the uploader's Objects.Limit.
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

// maxObject is the most bytes an object of o may take, its bytes
// written from memory or from disk (onDisk), over objs.
func (o Options) maxObject(objs Objects, onDisk bool) int64 {
	limit := objs.Limit(onDisk)
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
	// Objects are the objects written, in order: Size and CRC32C; Key
	// and Parts are the caller's to fill in (the uploader chose the
	// parts).
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

	b  *budget    // the bytes counted against coalesce_budget; its lock guards co too
	co *coalescer // Write's, under b.mu
	q  *jobQueue  // the flushed frames, to the encoders

	// done carries the appender's state once its goroutine has ended:
	// received once, by Close or Abort, which then own it.
	done chan *appender
}

// New starts a Writer writing its objects to objs. ctx cancels it. It fails
// when the partitions' fixed state alone would take more than half of
// the coalesce budget. The writer's goroutines run until Close or Abort.
func New(ctx context.Context, opt Options, objs Objects) (*Writer, error) {
	opt, err := opt.settle()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
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
	if opt.Schema != nil {
		co.setSchema(opt.Schema)
	}
	w := &Writer{opt: opt, ctx: cctx, cancel: cancel, b: b, co: co, q: q, done: make(chan *appender, 1)}
	context.AfterFunc(cctx, func() {
		b.wake()
		q.wake()
	})
	w.start(objs, codec, auto)
	return w, nil
}

// start starts the encoders and the appender, each with state of its
// own that the Writer does not hold: the appender's comes back on done.
func (w *Writer) start(objs Objects, codec string, auto *autoCodec) {
	opt := w.opt
	results := make(chan encoded, opt.Encoders)
	var keep *keeper
	var pieces *spill.File // where the encoders write spilled pieces
	if opt.Spill != nil {
		keep = &keeper{b: w.b, file: opt.Spill.Create()}
		if opt.Seal == nil {
			pieces = keep.file
		}
	}
	var encoders sync.WaitGroup
	for range opt.Encoders {
		e := &encoder{ctx: w.ctx, q: w.q, results: results, compression: opt.Compression, codec: codec, auto: auto,
			parent: opt.Mem, mem: &reuseAllocator{parent: opt.Mem}, seal: opt.Seal, spill: pieces}
		encoders.Go(e.run)
	}
	go func() {
		encoders.Wait()
		close(results)
	}()
	a := &appender{ctx: w.ctx, cancel: w.cancel, b: w.b, q: w.q, objs: objs, auto: auto,
		maxObject: opt.maxObject(objs, false), partitions: opt.Partitions, frameTarget: opt.FrameTargetBytes}
	if keep != nil {
		a.keep = keep
		if objs.Limit(true) > 0 {
			a.spillDir = opt.Spill
			a.maxFileObject = opt.maxObject(objs, true)
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
	return w.writeGuarded(partition, rec, frame.LogicalSize(rec))
}

// writeGuarded runs the coalescer's write under the lock.
func (w *Writer) writeGuarded(partition int, rec arrow.RecordBatch, size int64) error {
	return w.guarded(func() string { return fmt.Sprintf("write of %d rows to partition %d", rec.NumRows(), partition) },
		func() error { return w.co.write(partition, rec, size) })
}

// guarded runs f under the lock. A panic is recovered: the lock is
// released and the writer fails with it, what() naming the call.
func (w *Writer) guarded(what func() string, f func() error) (err error) {
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
			err = perr
		}
	}()
	return f()
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
// encoders and finishes the last object. The Result indexes every frame.
// On error nothing more is written, the object being written is aborted
// and a sorted writer's spill is removed; the caller aborts the objects'
// uploads.
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
// buffered, frames in flight, the object being written (Object.Abort)
// and a sorted writer's spill. Unless Close or Abort came first, it
// returns once the writer's goroutines have ended. The objects' uploads
// are the caller's to abort.
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
