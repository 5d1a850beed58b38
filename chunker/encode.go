package chunker

import (
	"bytes"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/durashuffle/durashuffle/chunker/frame"
	"github.com/durashuffle/durashuffle/internal/safe"
)

type encodeJob struct {
	seq       int64
	partition int
	items     []item    // the frame's rows in write order
	arena     *runArena // the arena its ranges are of, or nil
	held      int64     // counted in pending until the frame is appended
	// out: an output frame of a sorted writer, made of pieces (kept
	// frames of one partition) rather than items.
	out    bool
	pieces []keptFrame
	// raw: a small frame of a run a sorted writer spills, encoded without
	// compression: Close merges it with the partition's other pieces and
	// compresses the merged frame, so its bytes are compressed once, not
	// compressed, decompressed and compressed again.
	raw bool
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
	}
}

type encoded struct {
	seq       int64
	partition int
	held      int64
	buf       *bytes.Buffer
	stats     frame.Stats
	err       error
	out       bool   // an output frame of a sorted writer
	raw       bool   // encoded without compression (encodeJob.raw)
	crc       uint32 // the frame's CRC32C, when crcSet
	crcSet    bool
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

// next takes the next job off the queue, waiting for one; false once the
// queue is closed and empty.
func (w *Writer) next() (encodeJob, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if len(w.queue) == 0 {
			if w.qclosed {
				return encodeJob{}, false
			}
		} else if !w.queue[0].out || w.queue[0].seq < w.outNext+w.outWindow() || w.ctx.Err() != nil {
			break
		}
		w.work.Wait()
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
		dec    *frame.Decoder     // a sorted writer's, for kept frames merged at Close
	)
	// broken is the panic this encoder recovered from: its encoder and
	// gatherer may be half-way through a frame, so it encodes no more
	// (the writer has failed anyway once the appender sees it) and the
	// encoder is left to the garbage collector rather than closed.
	var broken error
	defer func() {
		if enc != nil && broken == nil {
			enc.Close()
		}
	}()
	encode := func(j *encodeJob, res *encoded) {
		defer func() {
			if r := recover(); r != nil {
				broken = safe.Recovered(r, "encode of a frame of partition %d", j.partition)
				res.err = broken
			}
		}()
		if enc == nil {
			w.mu.Lock()
			schema := w.schema
			w.mu.Unlock()
			enc, res.err = frame.NewEncoder(schema, w.opt.Compression, mem)
			gather, _ = frame.NewAccumulator(schema)
		}
		var codec string
		switch {
		case res.err != nil:
		case j.raw:
			res.err = enc.SetCodec(frame.None)
		case w.auto != nil:
			codec = w.auto.codec()
			res.err = enc.SetCodec(codec)
		default:
			res.err = enc.SetCodec(w.codec)
		}
		if res.err == nil && j.out {
			res.err = w.encodeOutput(enc, &dec, j, res)
		} else if res.err == nil {
			res.buf = bufPool.Get()
			start := time.Now()
			res.stats, res.err = encodeItems(enc, gather, res.buf, *j)
			if w.auto != nil && !j.raw && res.err == nil {
				w.auto.encoded(codec, res.buf.Len(), time.Since(start))
			}
		}
		if res.err != nil {
			res.err = fmt.Errorf("partition %d: %w", j.partition, res.err)
		}
	}
	for {
		j, ok := w.next()
		if !ok {
			return
		}
		res := encoded{seq: j.seq, partition: j.partition, held: j.held, out: j.out, raw: j.raw}
		switch {
		case broken != nil:
			res.err = broken
		case w.ctx.Err() == nil:
			encode(&j, &res)
		}
		// The caller's batches are released here too: a panic in one
		// fails the writer like an encoder's (the rest of the job's
		// memory is left to the garbage collector).
		if err := safe.Call(func() error { j.release(); return nil }, "release of the batches of a frame of partition %d", j.partition); err != nil && res.err == nil {
			res.err = err
		}
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
