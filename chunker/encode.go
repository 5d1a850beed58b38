package chunker

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// encodeJob is one frame to encode, or the end of a sorted writer's
// writing phase (end). Whoever holds it holds its references: release
// drops them.
type encodeJob struct {
	seq       int64 // its place in the stream, from the queue
	partition int
	items     []item    // the frame's rows in write order
	arena     *runArena // the arena its ranges are of, or nil
	held      int64     // counted in pending until the frame is appended
	// out: an output frame of a sorted writer, made of pieces (kept
	// frames of one partition, in memory or in file) rather than items.
	out    bool
	pieces []keptFrame
	file   *spill.File
	// inPlace: an output frame that is one kept frame, complete, in the
	// spill file, of an object written to files: it goes into the object
	// as a section of the spill file, its bytes neither read nor written.
	inPlace bool
	// raw: a small frame of a run a sorted writer spills, not encoded
	// but written as a piece (its rows' buffers; an uncompressed frame
	// where the schema has no gatherer): Close merges it with the
	// partition's other pieces and compresses the merged frame, so its
	// bytes are compressed once, not compressed, decompressed and
	// compressed again. bytes is its logical bytes.
	raw bool
	// keepRows: a small frame of a sorted writer's last run after spilled
	// ones, not encoded: its rows (items, arena, held) pass to the
	// appender as they are, to be merged into an output frame at Close.
	keepRows bool
	bytes    int64
	// end: no frame; every writing-phase frame is before it. The
	// appender takes it in seq order and queues a sorted writer's output.
	end bool
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
	for _, k := range j.pieces {
		if k.buf != nil {
			bufPool.Put(k.buf)
		}
		if k.unencoded != nil {
			k.unencoded.release()
		}
	}
}

// encoded is an encoder's result for one job, for the appender.
type encoded struct {
	seq       int64
	partition int
	held      int64
	buf       *bytes.Buffer
	stats     frame.Stats
	err       error
	out       bool   // an output frame of a sorted writer
	kept      int64  // an output frame's: the stored bytes of the kept frames it was made of
	raw       bool   // encoded without compression (encodeJob.raw)
	crc       uint32 // the frame's CRC32C, when crcSet
	crcSet    bool
	piece     bool // buf holds a piece (frame.Accumulator.Piece), not a frame
	// spilled: a piece the encoder wrote to the spill file (spillPiece);
	// buf is nil.
	spilled *spilledPiece
	end     bool // encodeJob.end
	// rows: an encodeJob.keepRows frame's rows, not encoded; the
	// appender keeps them (or releases them).
	rows *keptRows
	// inPlace: an encodeJob.inPlace frame, in the spill file; buf is nil.
	inPlace *keptFrame
}

// bufPool keeps the buffers of encoded frames for the next frames. Not a
// sync.Pool: a writer under a soft memory limit collects often, every
// collection empties a sync.Pool, and each frame would then grow (and
// the runtime zero) a new buffer of its size. At most framePoolSize
// buffers of up to framePoolMax bytes wait here, whichever writers put
// them: enough for the frames in flight of a few writers (each: one per
// encoder, as many in its results queue, the one being appended); with
// fewer, every frame past them grows a new buffer.
var bufPool = &framePool{free: make(chan *bytes.Buffer, framePoolSize)}

const (
	framePoolSize = 16
	framePoolMax  = 4 << 20
)

type framePool struct{ free chan *bytes.Buffer }

// Get returns an empty buffer.
func (p *framePool) Get() *bytes.Buffer {
	select {
	case b := <-p.free:
		return b
	default:
		return new(bytes.Buffer)
	}
}

// Put takes back a buffer nothing uses any more; one past framePoolMax,
// or one too many, is left to the collector.
func (p *framePool) Put(b *bytes.Buffer) {
	if b.Cap() > framePoolMax {
		return
	}
	b.Reset()
	select {
	case p.free <- b:
	default:
	}
}

// jobQueue hands the flushed frames to the encoders, in seq order: the
// coalescer pushes a run's frames (under its own lock, which it takes
// first), a sorted writer's appender pushes the output frames, and Close
// or Abort closes it. It has a lock of its own, so that encoders taking
// jobs do not wait on Write.
type jobQueue struct {
	ctx    context.Context
	window int64 // output frames the encoders may prepare ahead of the appender

	mu     sync.Mutex
	work   *sync.Cond // a job was pushed, the appender moved on, or the queue closed
	jobs   []encodeJob
	schema *arrow.Schema // the writer's, for the encoders
	seq    int64         // the next job's
	closed bool
	// outputting: output frames are queued; the encoders take them only
	// within window of outNext, the next seq the appender takes.
	outputting bool
	outNext    int64
}

func newJobQueue(ctx context.Context, window int64) *jobQueue {
	q := &jobQueue{ctx: ctx, window: window}
	q.work = sync.NewCond(&q.mu)
	return q
}

func (q *jobQueue) setSchema(s *arrow.Schema) {
	q.mu.Lock()
	q.schema = s
	q.mu.Unlock()
}

// push queues j, numbering it; false when the queue is closed.
func (q *jobQueue) push(j encodeJob) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	j.seq = q.seq
	q.seq++
	q.outputting = q.outputting || j.out
	q.jobs = append(q.jobs, j)
	q.work.Signal()
	return true
}

// pushAll queues jobs in order, numbering them, and takes the slice;
// false when the queue is closed, and the jobs are still the caller's.
func (q *jobQueue) pushAll(jobs []encodeJob) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	for i := range jobs {
		jobs[i].seq = q.seq
		q.seq++
		q.outputting = q.outputting || jobs[i].out
	}
	if len(q.jobs) == 0 {
		// The encoders kept up: the run's slice is the queue.
		q.jobs = jobs
	} else {
		q.jobs = append(q.jobs, jobs...)
	}
	q.work.Broadcast()
	return true
}

// close ends the queue: the encoders take what it holds, then end.
// Idempotent.
func (q *jobQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.work.Broadcast()
	q.mu.Unlock()
}

// wake wakes the encoders waiting for the output window: the writer
// failed, and they drain the queue.
func (q *jobQueue) wake() {
	q.mu.Lock()
	q.work.Broadcast()
	q.mu.Unlock()
}

// appended records that the appender took every job before seq next.
func (q *jobQueue) appended(next int64) {
	q.mu.Lock()
	q.outNext = next
	if q.outputting {
		q.work.Broadcast()
	}
	q.mu.Unlock()
}

// next takes the next job off the queue, waiting for one, with the
// writer's schema; false once the queue is closed and empty.
func (q *jobQueue) next() (encodeJob, *arrow.Schema, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if len(q.jobs) == 0 {
			if q.closed {
				return encodeJob{}, nil, false
			}
		} else if !q.jobs[0].out || q.jobs[0].seq < q.outNext+q.window || q.ctx.Err() != nil {
			break
		}
		q.work.Wait()
	}
	j := q.jobs[0]
	q.jobs[0] = encodeJob{}
	q.jobs = q.jobs[1:]
	if len(q.jobs) == 0 {
		q.jobs = nil
	}
	return j, q.schema, true
}

// encoder is one encoding goroutine's state: only that goroutine holds
// it. It takes jobs off the queue and sends each one's result to the
// appender, in the order it took them.
type encoder struct {
	ctx         context.Context
	q           *jobQueue
	results     chan<- encoded
	compression string     // Options.Compression, for frame.NewEncoder
	codec       string     // every frame's codec, but a raw one's; "" with auto
	auto        *autoCodec // compression auto: picks each frame's codec
	parent      memory.Allocator

	mem    *reuseAllocator
	schema *arrow.Schema
	enc    *frame.Encoder
	gather *frame.Accumulator // the frame's rows, gathered from the arena and its batches
	dec    *frame.Decoder     // a sorted writer's, for kept frames merged at Close
	seal   *frame.Sealer      // Options.Seal: nil writes plain frames
	// spill: a sorted writer's spill file, which the encoder writes a
	// spilled run's pieces to itself (spillPiece); nil when frames are
	// sealed (a sealed piece is a buffer of its own) or the writer does
	// not spill.
	spill *spill.File
	hdr   []byte   // spillPiece's scratch: a piece's uvarints
	vecs  [][]byte // and its slices
	// broken is the panic this encoder recovered from: its encoder and
	// gatherer may be half-way through a frame, so it encodes no more
	// (the writer has failed anyway once the appender sees it) and the
	// encoder is left to the garbage collector rather than closed.
	broken error
}

// run encodes jobs until the queue is closed and empty. Every job is
// answered, and its references released, even once the writer failed.
func (e *encoder) run() {
	defer e.mem.release()
	defer func() {
		if e.enc != nil && e.broken == nil {
			e.enc.Close()
		}
	}()
	for {
		j, schema, ok := e.q.next()
		if !ok {
			return
		}
		if j.end {
			e.results <- encoded{seq: j.seq, end: true}
			continue
		}
		if j.keepRows {
			// The job's references pass to the result, and on to the
			// output frame that encodes its rows.
			e.results <- encoded{seq: j.seq, partition: j.partition, held: j.held, rows: &keptRows{items: j.items, arena: j.arena, bytes: j.bytes}}
			continue
		}
		res := encoded{seq: j.seq, partition: j.partition, held: j.held, out: j.out, raw: j.raw}
		switch {
		case e.broken != nil:
			res.err = e.broken
		case e.ctx.Err() == nil:
			e.encode(&j, schema, &res)
		}
		// The caller's batches are released here too: a panic in one
		// fails the writer like an encoder's (the rest of the job's
		// memory is left to the garbage collector).
		if err := safe.Call(func() error { j.release(); return nil }, "release of the batches of a frame of partition %d", j.partition); err != nil && res.err == nil {
			res.err = err
		}
		e.results <- res
	}
}

// encode makes j's frame into res. A panic is recovered into res.err,
// and breaks the encoder.
func (e *encoder) encode(j *encodeJob, schema *arrow.Schema, res *encoded) {
	defer func() {
		if r := recover(); r != nil {
			e.broken = safe.Recovered(r, "encode of a frame of partition %d", j.partition)
			res.err = e.broken
		}
	}()
	if e.enc == nil {
		e.schema = schema
		e.enc, res.err = frame.NewEncoder(schema, e.compression, e.mem)
		e.gather, _ = frame.NewAccumulator(schema)
	}
	var codec string
	switch {
	case res.err != nil:
	case j.raw:
		res.err = e.enc.SetCodec(frame.None)
	case e.auto != nil:
		codec = e.auto.codec()
		res.err = e.enc.SetCodec(codec)
	default:
		res.err = e.enc.SetCodec(e.codec)
	}
	if res.err == nil && j.out {
		for _, k := range j.pieces {
			res.kept += k.length
		}
		res.err = e.encodeOutput(j, res)
	} else if res.err == nil && j.raw && e.gather != nil && e.spill != nil {
		res.stats, res.spilled, res.err = e.spillPiece(*j)
		res.piece = true
	} else if res.err == nil && j.raw && e.gather != nil {
		res.buf = bufPool.Get()
		res.stats, res.err = pieceItems(e.gather, res.buf, *j)
		res.piece = true
	} else if res.err == nil {
		res.buf = bufPool.Get()
		start := time.Now()
		res.stats, res.err = encodeItems(e.enc, e.gather, res.buf, *j)
		if e.auto != nil && !j.raw && res.err == nil {
			e.auto.encoded(codec, res.buf.Len(), time.Since(start))
		}
	}
	if res.err == nil && e.seal != nil && res.buf != nil && !res.crcSet {
		// A new frame or piece; one taken as it is (crcSet) was sealed
		// when it was kept.
		if res.piece {
			res.err = e.seal.SealPiece(res.buf, 0, j.partition)
		} else {
			res.err = e.seal.Seal(res.buf, 0, j.partition)
		}
	}
	if res.err != nil {
		res.err = fmt.Errorf("partition %d: %w", j.partition, res.err)
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
	if err := gatherItems(gather, j.items, j.arena); err != nil {
		return frame.Stats{}, err
	}
	rec := gather.View()
	defer rec.Release()
	return enc.Encode(buf, []arrow.RecordBatch{rec})
}

// spilledPiece is where spillPiece wrote a piece in the spill file.
type spilledPiece struct {
	off, length int64
	crc         uint32
}

// spillPiece gathers j's rows and writes them to the spill file as a
// piece, straight from the gatherer's buffers (vectored writes, no
// copy into a buffer of the piece's own): the spill is the only place a
// spilled run's piece goes. The appender's keeper records it.
func (e *encoder) spillPiece(j encodeJob) (frame.Stats, *spilledPiece, error) {
	e.gather.Reset()
	if err := gatherItems(e.gather, j.items, j.arena); err != nil {
		return frame.Stats{}, nil, err
	}
	var n int
	e.vecs, e.hdr, n = e.gather.PieceVecs(e.hdr, e.vecs)
	var crc uint32
	for _, b := range e.vecs {
		crc = store.UpdateCRC32C(crc, b)
	}
	off, err := e.spill.AppendVec(e.vecs, int64(n))
	clear(e.vecs) // no hold on the gatherer's buffers past the write
	if err != nil {
		return frame.Stats{}, nil, err
	}
	return frame.Stats{Rows: e.gather.Rows(), Bytes: j.bytes}, &spilledPiece{off: off, length: int64(n), crc: crc}, nil
}

// pieceItems writes j's rows into buf as a piece (frame.Accumulator.Piece):
// what a spilled run keeps of a small frame, to be merged at Close, is
// its rows' buffers, not an IPC frame to build now and parse then. Its
// Stats are its rows and the logical bytes the coalescer counted.
func pieceItems(gather *frame.Accumulator, buf *bytes.Buffer, j encodeJob) (frame.Stats, error) {
	gather.Reset()
	if err := gatherItems(gather, j.items, j.arena); err != nil {
		return frame.Stats{}, err
	}
	// Room for a sealed piece's nonce and tag too, so that sealing it
	// does not copy it into a larger buffer.
	frame.GrowTo(buf, gather.PieceSize()+frame.Overhead)
	*buf = *bytes.NewBuffer(gather.Piece(buf.AvailableBuffer()))
	return frame.Stats{Rows: gather.Rows(), Bytes: j.bytes}, nil
}

// gatherItems copies items' rows (of arena's segments, or retained
// batches) into gather, in order.
func gatherItems(gather *frame.Accumulator, items []item, arena *runArena) error {
	for _, it := range items {
		var err error
		if it.rec != nil {
			err = gather.Append(it.rec)
		} else {
			err = gather.AppendRange(arena.segs[it.seg], it.lo, it.hi-it.lo)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
