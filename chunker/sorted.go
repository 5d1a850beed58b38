package chunker

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/durashuffle/durashuffle/chunker/frame"
	"github.com/durashuffle/durashuffle/store"
)

// A sorted writer (Options.Spill set) writes ONE partition-sorted run
// per object, whatever its output size. While input arrives, its frames
// are encoded as usual but kept, not appended: in memory while the
// output fits coalesce_budget, and in the writer's spill file from the
// first run that flushes before Close (the budget filled). At Close the
// object is written in partition order: each partition's kept frames,
// from every run, are merged into frames near frame_target_bytes (a
// frame that is near it already is copied as it is; smaller ones are
// decoded and encoded again as one), so the stored bytes and a reader's
// GETs do not depend on how many runs the writer flushed. A spilled
// run's frames under half of frame_target_bytes, nearly all of them at
// many partitions, are spilled uncompressed (raw): their bytes are then
// compressed once, at Close, not compressed, decompressed and compressed
// again, at the cost of spilling about the logical bytes.
//
// Memory: kept frames in memory count against coalesce_budget until
// they are spilled; at Close, at most outWindow output frames are read
// back and merged ahead of the one being appended.

// keptFrame is one encoded frame of the writing phase.
type keptFrame struct {
	partition   int
	rows, bytes int64 // the frame's Stats
	crc         uint32
	length      int64
	off         int64         // in the spill file, once spilled
	buf         *bytes.Buffer // in memory until spilled; nil after
	raw         bool          // encoded without compression, to be merged
}

// keptSize is what each kept frame's entry costs until Close.
const keptSize = int64(unsafe.Sizeof(keptFrame{}))

// keep takes a writing-phase frame: into memory, or to the spill once
// the writer spills. It reports the change in bytes held in memory.
// Ownership of r.buf passes when it is kept in memory as it is (kept
// true), not copied to a buffer of its size.
func (w *Writer) keep(r encoded) (mem int64, kept bool, err error) {
	b := r.buf.Bytes()
	k := keptFrame{partition: r.partition, rows: r.stats.Rows, bytes: r.stats.Bytes, crc: store.CRC32C(b), length: int64(len(b)), raw: r.raw}
	w.mu.Lock()
	spilling := w.spilling
	w.mu.Unlock()
	if spilling {
		if mem, err = w.spillKept(); err != nil {
			return mem, false, err
		}
		if k.off, err = w.spillFile.Append(b); err != nil {
			return mem, false, err
		}
		w.spilled += k.length
	} else {
		mem = k.length
		if r.buf.Cap() > len(b)+len(b)/8 {
			// An encode buffer has room for its frame uncompressed; a
			// frame kept until Close holds only its own bytes, as the
			// budget counts it, and the buffer serves the next frame.
			k.buf = bytes.NewBuffer(append([]byte(nil), b...))
		} else {
			k.buf, kept = r.buf, true
		}
		w.keptInMem++
	}
	if len(w.kept) == cap(w.kept) {
		// Write reserved the capacity (as index entries, no smaller)
		// before it flushed this frame.
		w.kept = growTo(w.kept, w.reservedCap())
	}
	w.kept = append(w.kept, k)
	return mem, kept, nil
}

// spillKept writes the frames kept in memory to the spill, oldest first,
// and reports the (negative) change in bytes held in memory.
func (w *Writer) spillKept() (int64, error) {
	var freed int64
	if w.keptInMem == 0 {
		// Called for every frame kept while spilling: the frames before
		// went to disk already.
		return 0, nil
	}
	for i := range w.kept {
		k := &w.kept[i]
		if k.buf == nil {
			continue
		}
		off, err := w.spillFile.Append(k.buf.Bytes())
		if err != nil {
			return -freed, err
		}
		w.spilled += k.length
		k.off = off
		bufPool.Put(k.buf)
		k.buf = nil
		freed += k.length
		w.keptInMem--
	}
	return -freed, nil
}

// dropKept returns the kept frames' memory and removes the spill.
func (w *Writer) dropKept() {
	for i := range w.kept {
		if b := w.kept[i].buf; b != nil {
			bufPool.Put(b)
		}
	}
	w.kept = nil
	if w.spillFile != nil {
		w.spillFile.Remove()
	}
}

// queueOutputLocked queues the object's frames in partition order, once
// every writing-phase frame is kept: per partition, its kept frames in
// write order, grouped into frames near frame_target_bytes. The kept
// frames pass to the jobs.
func (w *Writer) queueOutputLocked() {
	starts := make([]int, w.opt.Partitions+1)
	for _, k := range w.kept {
		starts[k.partition+1]++
	}
	for p := range w.opt.Partitions {
		starts[p+1] += starts[p]
	}
	order := make([]int32, len(w.kept))
	next := append([]int(nil), starts[:w.opt.Partitions]...)
	for i, k := range w.kept {
		order[next[k.partition]] = int32(i)
		next[k.partition]++
	}
	// An object that will stay under one chunk is not streamed: a part
	// streamed while its chunk fills is sent again whole when the chunk
	// ends short, and the kept frames' bytes say now that it will.
	var total int64
	for _, k := range w.kept {
		total += k.length
	}
	if w.stream != nil && total < w.opt.ChunkSize*3/4 {
		w.stream = nil
	}
	target := w.opt.FrameTargetBytes
	var group []keptFrame
	var gbytes, gmem int64
	emit := func(p int) {
		if len(group) == 0 {
			return
		}
		w.queue = append(w.queue, encodeJob{seq: w.seq, partition: p, out: true, pieces: group, held: gmem})
		w.seq++
		w.inflight++
		group, gbytes, gmem = nil, 0, 0
	}
	for p := range w.opt.Partitions {
		for _, i := range order[starts[p]:starts[p+1]] {
			k := w.kept[i]
			if len(group) > 0 && gbytes+k.bytes > target+target/4 {
				emit(p)
			}
			group = append(group, k)
			gbytes += k.bytes
			if k.buf != nil {
				gmem += k.length
			}
		}
		emit(p)
	}
	// The in-memory frames' bytes are the jobs' now, counted in pending
	// until appended.
	w.pending += w.keptMem
	w.keptMem = 0
	w.kept = nil
	w.outputting = true
	w.work.Broadcast()
}

// outWindow is how many output frames the encoders may prepare ahead of
// the one being appended.
func (w *Writer) outWindow() int64 { return int64(2*w.opt.Encoders + 2) }

// pieceBytes returns the stored bytes of a kept frame: its buffer, or a
// pooled buffer read back from the spill and checked against the CRC32C
// taken when it was kept, so a byte changed on disk never reaches the
// object.
func (w *Writer) pieceBytes(k keptFrame) (*bytes.Buffer, error) {
	if k.buf != nil {
		return k.buf, nil
	}
	buf := bufPool.Get()
	frame.GrowTo(buf, int(k.length))
	b := buf.AvailableBuffer()[:k.length]
	if err := w.spillFile.ReadAt(b, k.off); err != nil {
		bufPool.Put(buf)
		return nil, err
	}
	if got := store.CRC32C(b); got != k.crc {
		bufPool.Put(buf)
		return nil, fmt.Errorf("spill %s: frame of partition %d at offset %d (%d bytes) has CRC32C %08x, written as %08x: the spill file changed on disk",
			w.spillFile.Name(), k.partition, k.off, k.length, got, k.crc)
	}
	// The bytes are in buf's spare room already: take them in, no copy.
	*buf = *bytes.NewBuffer(b)
	return buf, nil
}

// encodeOutput makes one output frame of j's pieces: the piece itself
// when there is one, encoded with the writer's codec, else the pieces
// decoded and encoded again as one frame (a raw piece alone is encoded
// again too, to be compressed).
func (w *Writer) encodeOutput(enc *frame.Encoder, dec **frame.Decoder, j *encodeJob, res *encoded) error {
	if len(j.pieces) == 1 && !j.pieces[0].raw {
		k := j.pieces[0]
		buf, err := w.pieceBytes(k)
		if err != nil {
			return err
		}
		j.pieces = nil // the buffer is the result's now
		res.buf, res.stats, res.crc, res.crcSet = buf, frame.Stats{Rows: k.rows, Bytes: k.bytes}, k.crc, true
		return nil
	}
	if *dec == nil {
		d, err := frame.NewDecoder(w.schema)
		if err != nil {
			return err
		}
		*dec = d
	}
	var recs []arrow.RecordBatch
	var bufs []*bytes.Buffer
	defer func() {
		// The batches may point into the buffers: released first.
		for _, r := range recs {
			r.Release()
		}
		for _, b := range bufs {
			bufPool.Put(b)
		}
	}()
	frames := make([][]byte, len(j.pieces))
	for i, k := range j.pieces {
		buf, err := w.pieceBytes(k)
		if err != nil {
			return err
		}
		j.pieces[i].buf = nil // bufs returns it
		bufs = append(bufs, buf)
		frames[i] = buf.Bytes()
	}
	recs, err := (*dec).DecodeAll(frames, w.opt.Mem)
	if err != nil {
		return fmt.Errorf("merge the %d frames kept for partition %d: %w", len(j.pieces), j.partition, err)
	}
	res.buf = bufPool.Get()
	res.stats, err = enc.Encode(res.buf, recs)
	return err
}
