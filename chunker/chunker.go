package chunker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/frame"
)

// MaxParts is S3's limit on parts per multipart upload.
const MaxParts = 10000

// Sentinel errors.
var (
	ErrPartition = errors.New("partition out of range")
	ErrSchema    = errors.New("schema differs from the writer's schema")
	ErrClosed    = errors.New("writer is closed")
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

// Frame is one frame's index entry.
type Frame struct {
	Partition int
	Object    int
	Offset    int64
	Length    int64
	Rows      int64
	Bytes     int64 // uncompressed Arrow bytes
	CRC32C    uint32
}

// Object describes one data object of the stream.
type Object struct {
	Size   int64
	Parts  int
	CRC32C uint32 // of the whole object
}

// Result is what a closed Writer produced.
type Result struct {
	Schema  *arrow.Schema
	Frames  []Frame // in stream order
	Objects []Object
	Rows    int64
	Bytes   int64 // uncompressed Arrow bytes
}

type pbuf struct {
	recs  []arrow.RecordBatch
	bytes int64 // logical: what frame_target_bytes counts
	held  int64 // in memory: what coalesce_budget counts (heldPerLogical)
	rows  int64
}

type encodeJob struct {
	seq       int64
	partition int
	recs      []arrow.RecordBatch
}

type encoded struct {
	seq       int64
	partition int
	buf       *bytes.Buffer
	stats     frame.Stats
	err       error
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Writer is the chunker for one worker attempt. Write is safe for many
// goroutines at once; Close and Abort are called once, after the last Write.
type Writer struct {
	opt    Options
	sink   Sink
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	schema   *arrow.Schema
	parts    []pbuf
	buffered int64 // held bytes of every partition buffer
	seq      int64
	closed   bool
	writers  sync.WaitGroup // Writes between buffering and submitting

	jobs    chan encodeJob
	results chan encoded
	encWG   sync.WaitGroup
	appDone chan struct{}

	// appender state, owned by the appender goroutine
	cur     []byte
	obj     int
	part    int32
	objOff  int64
	objCRC  uint32
	objects []Object
	frames  []Frame
	rows    int64
	bytes   int64
}

// New starts a Writer emitting chunks to sink. ctx cancels it.
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
	cctx, cancel := context.WithCancelCause(ctx)
	w := &Writer{
		opt:     opt,
		sink:    sink,
		ctx:     cctx,
		cancel:  cancel,
		schema:  opt.Schema,
		parts:   make([]pbuf, opt.Partitions),
		jobs:    make(chan encodeJob, opt.Encoders),
		results: make(chan encoded, opt.Encoders),
		appDone: make(chan struct{}),
	}
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

// Write adds rec's rows to partition. The writer retains rec; the caller
// may release it when Write returns. Write blocks while the encoders or
// the upload budget are behind, and returns the writer's first failure at
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
	perByte := heldPerLogical(rec)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.schema == nil {
		w.schema = rec.Schema()
	} else if !w.schema.Equal(rec.Schema()) {
		w.mu.Unlock()
		return fmt.Errorf("%w: partition %d got %s, want %s", ErrSchema, partition, rec.Schema(), w.schema)
	}
	var ready []encodeJob
	// A batch larger than a frame is cut into frame-sized slices, so a
	// reader never needs more than a frame's bytes to decode one.
	if size > w.opt.FrameTargetBytes && rec.NumRows() > 1 {
		n := rec.NumRows()
		step := max(1, (n*w.opt.FrameTargetBytes+size-1)/size)
		for lo := int64(0); lo < n; lo += step {
			s := rec.NewSlice(lo, min(lo+step, n))
			ss := frame.LogicalSize(s)
			ready = append(ready, w.addLocked(partition, s, ss, int64(float64(ss)*perByte))...)
			s.Release()
		}
	} else {
		ready = w.addLocked(partition, rec, size, int64(float64(size)*perByte))
	}
	w.writers.Add(1)
	w.mu.Unlock()
	defer w.writers.Done()
	return w.submit(ready)
}

// addLocked buffers rec, size logical bytes occupying held bytes, and
// returns the jobs that became ready.
func (w *Writer) addLocked(partition int, rec arrow.RecordBatch, size, held int64) []encodeJob {
	rec.Retain()
	p := &w.parts[partition]
	p.recs = append(p.recs, rec)
	p.bytes += size
	p.held += held
	p.rows += rec.NumRows()
	w.buffered += held
	var ready []encodeJob
	if p.bytes >= w.opt.FrameTargetBytes {
		ready = append(ready, w.detachLocked(partition))
	}
	for w.buffered > w.opt.CoalesceBudget {
		largest := 0
		for i := range w.parts {
			if w.parts[i].held > w.parts[largest].held {
				largest = i
			}
		}
		ready = append(ready, w.detachLocked(largest))
	}
	return ready
}

func (w *Writer) detachLocked(partition int) encodeJob {
	p := &w.parts[partition]
	j := encodeJob{seq: w.seq, partition: partition, recs: p.recs}
	w.seq++
	w.buffered -= p.held
	*p = pbuf{}
	return j
}

func (w *Writer) submit(jobs []encodeJob) error {
	for i, j := range jobs {
		select {
		case w.jobs <- j:
		case <-w.ctx.Done():
			for _, k := range jobs[i:] {
				release(k.recs)
			}
			return context.Cause(w.ctx)
		}
	}
	return nil
}

func release(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

func (w *Writer) encoder() {
	defer w.encWG.Done()
	mem := &reuseAllocator{parent: w.opt.Mem}
	defer mem.release()
	for j := range w.jobs {
		res := encoded{seq: j.seq, partition: j.partition}
		if w.ctx.Err() == nil {
			res.buf = bufPool.Get().(*bytes.Buffer)
			res.buf.Reset()
			res.stats, res.err = frame.Encode(res.buf, w.schema, j.recs, w.opt.Compression, mem)
			if res.err != nil {
				res.err = fmt.Errorf("partition %d: %w", j.partition, res.err)
			}
		}
		release(j.recs)
		w.results <- res
	}
}

// appender puts encoded frames into the byte stream in submission order.
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
		}
	}
}

func (w *Writer) maxObject() int64 {
	limit := w.opt.ChunkSize * MaxParts
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
	w.frames = append(w.frames, Frame{
		Partition: r.partition,
		Object:    w.obj,
		Offset:    w.objOff,
		Length:    int64(len(b)),
		Rows:      r.stats.Rows,
		Bytes:     r.stats.Bytes,
		CRC32C:    frame.CRC32C(b),
	})
	w.rows += r.stats.Rows
	w.bytes += r.stats.Bytes
	w.objCRC = frame.UpdateCRC32C(w.objCRC, b)
	w.objOff += int64(len(b))
	for len(b) > 0 {
		if w.cur != nil && int64(len(w.cur)) == w.opt.ChunkSize {
			// More bytes follow, so the full chunk is not the last one.
			w.part++
			if w.part > MaxParts {
				return fmt.Errorf("object %d: more than %d parts of %d bytes", w.obj, MaxParts, w.opt.ChunkSize)
			}
			if err := w.sink.Emit(w.obj, w.part, w.cur, false); err != nil {
				w.cur = nil
				return err
			}
			w.cur = nil
		}
		if w.cur == nil {
			buf, err := w.sink.Acquire(w.ctx)
			if err != nil {
				return err
			}
			w.cur = buf
		}
		n := min(int64(len(b)), w.opt.ChunkSize-int64(len(w.cur)))
		w.cur = append(w.cur, b[:n]...)
		b = b[n:]
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
	w.objects = append(w.objects, Object{Size: w.objOff, Parts: int(w.part), CRC32C: w.objCRC})
	w.obj++
	w.part, w.objOff, w.objCRC = 0, 0, 0
	return err
}

// Close flushes the remaining buffers in partition order, waits for the
// encoders and emits the last chunk. The Result indexes every frame.
func (w *Writer) Close() (Result, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return Result{}, ErrClosed
	}
	w.closed = true
	var ready []encodeJob
	for i := range w.parts {
		if len(w.parts[i].recs) > 0 {
			ready = append(ready, w.detachLocked(i))
		}
	}
	w.mu.Unlock()
	err := w.submit(ready)
	w.writers.Wait()
	close(w.jobs)
	<-w.appDone
	if err == nil {
		err = w.Err()
	}
	if err == nil {
		err = w.endObject()
	}
	if err != nil {
		w.cancel(err)
		w.dropCurrent()
		return Result{}, err
	}
	w.cancel(ErrClosed)
	return Result{Schema: w.schema, Frames: w.frames, Objects: w.objects, Rows: w.rows, Bytes: w.bytes}, nil
}

// Abort cancels the writer with cause and drops every buffer.
func (w *Writer) Abort(cause error) {
	w.cancel(cause)
	w.mu.Lock()
	already := w.closed
	w.closed = true
	for i := range w.parts {
		release(w.parts[i].recs)
		w.parts[i] = pbuf{}
	}
	w.mu.Unlock()
	if !already {
		w.writers.Wait()
		close(w.jobs)
		<-w.appDone
		w.dropCurrent()
	}
}

func (w *Writer) dropCurrent() {
	if w.cur != nil {
		w.sink.Release(w.cur)
		w.cur = nil
	}
}
