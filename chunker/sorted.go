package chunker

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// A sorted writer (Options.Spill set) writes ONE partition-sorted run
// per object, whatever its output size. While input arrives, its frames
// are encoded as usual but kept, not appended: in memory while the
// output fits coalesce_budget, and in the writer's spill file from the
// first run that flushes before Close (the budget filled). At Close the
// object is written in partition order: each partition's kept frames,
// from every run, are merged into frames near frame_target_bytes (an
// encoded frame of at least half of it is copied as it is; runs of
// smaller ones are decoded and encoded again as one), so the stored
// bytes and a reader's GETs do not depend on how many runs the writer
// flushed. A spilled run's frames under half of frame_target_bytes,
// nearly all of them at many partitions, are not encoded at all (raw):
// the spill takes their rows' column buffers as a piece
// (frame.Accumulator.Piece), which the encoder writes from the buffers it
// gathered the rows into (spillPiece, vectored writes), and which Close
// copies into the merged frame as they are, so their bytes are
// compressed once, at Close, and no IPC
// frame is built for them nor parsed back, at the cost of spilling about
// the logical bytes. The last run's small frames, after spilled ones,
// are not encoded either: their rows stay in the run's arena (keptRows)
// until Close merges them.
//
// A spilled writer's object, over objects that take sections of files
// (Objects.Limit(true) > 0), goes from disk rather than through memory:
// its frames taken as they are stay in the spill file, the merged ones
// are written to a file of the object's own, and the object is handed
// sections of both as soon as their bytes are on disk (ondisk.go).
//
// Memory: kept frames in memory count against coalesce_budget until
// they are spilled; at Close, at most the job queue's window of output
// frames are read back and merged ahead of the one being appended.

// keptFrame is one frame of the writing phase: encoded, a piece, or
// rows kept unencoded.
type keptFrame struct {
	partition   int
	rows, bytes int64 // the frame's Stats
	crc         uint32
	length      int64
	off         int64         // in the spill file, once spilled
	buf         *bytes.Buffer // in memory until spilled; nil after
	raw         bool          // encoded without compression, to be merged
	piece       bool          // a raw one kept as a piece (frame.Accumulator.Piece), not a frame
	codec       byte          // a frame's first header byte, its codec (keptCodec)
	// unencoded: not a frame but a last-run frame's rows, kept as they
	// are (raw, its length its logical bytes); nil for an encoded frame.
	unencoded *keptRows
}

// keptRows is the rows of a sorted writer's last-run frame that Close
// merges with its partition's spilled pieces: encoded once, into the
// output frame, rather than encoded, kept, decoded and encoded again.
// It holds the frame's references (its retained batches, its run's
// arena) and its memory (held) stays counted until the output frame is
// appended.
type keptRows struct {
	items []item
	arena *runArena
	bytes int64 // logical
	held  int64
}

// release drops the rows' references.
func (r *keptRows) release() {
	(&encodeJob{items: r.items, arena: r.arena}).release()
	r.items, r.arena = nil, nil
}

// numRows is the rows' count.
func (r *keptRows) numRows() int64 {
	var n int64
	for _, it := range r.items {
		if it.rec != nil {
			n += it.rec.NumRows()
		} else {
			n += it.hi - it.lo
		}
	}
	return n
}

// records returns the rows as record batches in order: the retained
// batches, and slices of the arena's segments (no copy); the caller
// releases them.
func (r *keptRows) records() []arrow.RecordBatch {
	recs := make([]arrow.RecordBatch, 0, len(r.items))
	for _, it := range r.items {
		if it.rec != nil {
			it.rec.Retain()
			recs = append(recs, it.rec)
		} else {
			recs = append(recs, r.arena.segs[it.seg].NewSlice(it.lo, it.hi))
		}
	}
	return recs
}

// keptSize is what each kept frame's entry costs until Close.
const keptSize = int64(unsafe.Sizeof(keptFrame{}))

// keeper is a sorted writer's frames of the writing phase, part of the
// appender's state: only the appending goroutine touches it while the
// writer runs, then Close or Abort. The encoders append spilled pieces
// to its spill file too (spillPiece; the file takes appends in turn),
// and read it when they merge the output frames, which the appender
// queues only once it has appended the last frame to it.
type keeper struct {
	b    *budget // whether to spill, and the index capacity reserved
	file *spill.File
	// shared: the file's owners once an object's parts read it in place
	// (its uploads and the keeper); nil until then, the keeper its only
	// owner.
	shared  *sharedFile
	kept    []keptFrame
	spilled int64 // bytes written to file
	inMem   int   // kept frames in memory
}

// keep takes a writing-phase frame: into memory, or to the spill once
// the writer spills. It reports the change in bytes held in memory.
// Ownership of r.buf passes when it is kept in memory as it is (kept
// true), not copied to a buffer of its size.
func (k *keeper) keep(r encoded) (mem int64, kept bool, err error) {
	b := r.buf.Bytes()
	f := keptFrame{partition: r.partition, rows: r.stats.Rows, bytes: r.stats.Bytes, crc: store.CRC32C(b), length: int64(len(b)), raw: r.raw, piece: r.piece}
	if !r.piece && len(b) > 0 {
		f.codec = b[0]
	}
	if k.b.isSpilling() {
		if mem, err = k.spillKept(); err != nil {
			return mem, false, err
		}
		if f.off, err = k.file.Append(b); err != nil {
			return mem, false, err
		}
		k.spilled += f.length
	} else {
		mem = f.length
		if r.buf.Cap() > len(b)+len(b)/8 {
			// An encode buffer has room for its frame uncompressed; a
			// frame kept until Close holds only its own bytes, as the
			// budget counts it, and the buffer serves the next frame.
			f.buf = bytes.NewBuffer(append([]byte(nil), b...))
		} else {
			f.buf, kept = r.buf, true
		}
		k.inMem++
	}
	if len(k.kept) == cap(k.kept) {
		// Write reserved the capacity (as index entries, no smaller)
		// before it flushed this frame.
		k.kept = growTo(k.kept, k.b.reserved())
	}
	k.kept = append(k.kept, f)
	return mem, kept, nil
}

// keepSpilled takes a piece an encoder wrote to the spill file
// (r.spilled). While the writer spills, the frames kept in memory go to
// the spill first, as keep sends them; a piece of a spilled run that
// arrives after the last run began stays where it is, on disk.
func (k *keeper) keepSpilled(r encoded) (mem int64, err error) {
	if k.b.isSpilling() {
		if mem, err = k.spillKept(); err != nil {
			return mem, err
		}
	}
	p := r.spilled
	k.spilled += p.length
	if len(k.kept) == cap(k.kept) {
		k.kept = growTo(k.kept, k.b.reserved())
	}
	k.kept = append(k.kept, keptFrame{partition: r.partition, rows: r.stats.Rows, bytes: r.stats.Bytes, crc: p.crc,
		length: p.length, off: p.off, raw: true, piece: true})
	return mem, nil
}

// keepRows takes a last-run frame's rows (r.rows), kept in memory until
// Close; their memory (r.held) stays counted, as kept frames' in memory.
func (k *keeper) keepRows(r encoded) {
	rows := r.rows
	rows.held = r.held
	f := keptFrame{partition: r.partition, rows: rows.numRows(), bytes: rows.bytes, length: rows.bytes, raw: true}
	if len(k.kept) == cap(k.kept) {
		k.kept = growTo(k.kept, k.b.reserved())
	}
	f.unencoded = rows
	k.kept = append(k.kept, f)
}

// spillKept writes the frames kept in memory to the spill, oldest first,
// and reports the (negative) change in bytes held in memory.
func (k *keeper) spillKept() (int64, error) {
	var freed int64
	if k.inMem == 0 {
		// Called for every frame kept while spilling: the frames before
		// went to disk already.
		return 0, nil
	}
	for i := range k.kept {
		f := &k.kept[i]
		if f.buf == nil {
			continue
		}
		off, err := k.file.Append(f.buf.Bytes())
		if err != nil {
			return -freed, err
		}
		k.spilled += f.length
		f.off = off
		bufPool.Put(f.buf)
		f.buf = nil
		freed += f.length
		k.inMem--
	}
	return -freed, nil
}

// dropKept returns the kept frames' memory and removes the spill.
func (k *keeper) drop() {
	for i := range k.kept {
		if b := k.kept[i].buf; b != nil {
			bufPool.Put(b)
		}
		if r := k.kept[i].unencoded; r != nil {
			r.release()
		}
	}
	k.kept = nil
	k.inMem = 0
	if k.shared != nil {
		k.shared.drop()
		k.shared = nil
	} else {
		k.file.Remove()
	}
}

// share returns the spill file as a file of more than one owner, the
// keeper one of them.
func (k *keeper) share() *sharedFile {
	if k.shared == nil {
		k.shared = &sharedFile{f: k.file}
		k.shared.refs.Store(1)
	}
	return k.shared
}

// sharedFile is a spill file with more than one owner: removed when the
// last one lets go of it.
type sharedFile struct {
	f    *spill.File
	refs atomic.Int32
}

func (s *sharedFile) hold() { s.refs.Add(1) }

func (s *sharedFile) drop() {
	if s.refs.Add(-1) == 0 {
		s.f.Remove()
	}
}

// output ends a sorted writer's writing phase, every frame of it kept:
// it queues the object's frames in partition order, then closes the
// queue. A failed writer queues nothing.
func (a *appender) output() {
	if a.keep == nil || a.ctx.Err() != nil {
		a.q.close()
		return
	}
	est := a.keep.estimateStored()
	a.sizeHint = est
	if a.toFile(est) {
		// The object goes from disk (ondisk.go), bounded by the spill
		// limit and the objects' limit from disk.
		a.fileMode = true
		a.maxObject = a.maxFileObject
	}
	jobs, _ := a.keep.outputJobs(a.partitions, a.frameTarget)
	if a.fileMode {
		for i := range jobs {
			jobs[i].inPlace = jobs[i].pieces[0].inPlace(len(jobs[i].pieces))
		}
	}
	// The in-memory frames' bytes are the jobs' now, counted in pending
	// until appended.
	a.b.startOutput()
	if !a.q.pushAll(jobs) {
		// Abort closed the queue.
		for i := range jobs {
			jobs[i].release()
		}
	}
	a.q.close()
}

// outputJobs makes the object's frames: per partition, its kept frames
// in write order, grouped into frames near target; and reports their
// stored bytes. The kept frames pass to the jobs.
func (k *keeper) outputJobs(partitions int, target int64) (jobs []encodeJob, total int64) {
	starts := make([]int, partitions+1)
	for _, f := range k.kept {
		starts[f.partition+1]++
		total += f.length
	}
	for p := range partitions {
		starts[p+1] += starts[p]
	}
	order := make([]int32, len(k.kept))
	next := append([]int(nil), starts[:partitions]...)
	for i, f := range k.kept {
		order[next[f.partition]] = int32(i)
		next[f.partition]++
	}
	var group []keptFrame
	var gbytes, gmem int64
	emit := func(p int) {
		if len(group) == 0 {
			return
		}
		jobs = append(jobs, encodeJob{partition: p, out: true, pieces: group, file: k.file, held: gmem})
		group, gbytes, gmem = nil, 0, 0
	}
	for p := range partitions {
		for _, i := range order[starts[p]:starts[p+1]] {
			f := k.kept[i]
			if f.complete(target) {
				// An output frame as it is: merging it would decode it
				// and encode it again (and, where the object goes to
				// files, read and write bytes that can stay in place).
				emit(p)
				group, gbytes, gmem = []keptFrame{f}, f.bytes, f.memLength()
				emit(p)
				continue
			}
			if len(group) > 0 && gbytes+f.bytes > target+target/4 {
				emit(p)
			}
			group = append(group, f)
			gbytes += f.bytes
			gmem += f.memLength()
			if f.unencoded != nil {
				gmem += f.unencoded.held
			}
		}
		emit(p)
	}
	k.kept, k.inMem = nil, 0
	return jobs, total
}

// keptCodec is the codec name (frame.CodecName) of a kept frame whose
// first header byte is c.
func keptCodec(c byte) string {
	var hdr [frame.HeaderSize]byte
	hdr[0] = c
	return frame.CodecName(hdr[:])
}

// inPlace reports whether a kept frame, alone in an output frame of n
// kept frames, is that output frame as it is, in the spill file: encoded
// with the writer's codec, not a piece, on disk.
func (f keptFrame) inPlace(n int) bool {
	return n == 1 && f.encoded() && f.buf == nil
}

// complete reports whether a kept frame is an output frame as it is:
// encoded with the writer's codec and at least half of target logical
// bytes.
func (f keptFrame) complete(target int64) bool {
	return f.encoded() && f.bytes >= target/2
}

// encoded reports whether a kept frame is a frame encoded with the
// writer's codec: not raw, not a piece, not rows.
func (f keptFrame) encoded() bool {
	return !f.raw && !f.piece && f.unencoded == nil
}

// memLength is the bytes of the frame held in memory: its buffer's.
func (f keptFrame) memLength() int64 {
	if f.buf != nil {
		return f.length
	}
	return 0
}

// pieceBytes returns the stored bytes of a kept frame: its buffer, or a
// pooled buffer read back from the spill and checked against the CRC32C
// taken when it was kept, so a byte changed on disk never reaches the
// object.
func pieceBytes(file *spill.File, k keptFrame) (*bytes.Buffer, error) {
	if k.buf != nil {
		return k.buf, nil
	}
	buf := bufPool.Get()
	frame.GrowTo(buf, int(k.length))
	b := buf.AvailableBuffer()[:k.length]
	if err := file.ReadAt(b, k.off); err != nil {
		bufPool.Put(buf)
		return nil, err
	}
	if got := store.CRC32C(b); got != k.crc {
		bufPool.Put(buf)
		return nil, fmt.Errorf("spill %s: frame of partition %d at offset %d (%d bytes) has CRC32C %08x, written as %08x: the spill file changed on disk",
			file.Name(), k.partition, k.off, k.length, got, k.crc)
	}
	// The bytes are in buf's spare room already: take them in, no copy.
	*buf = *bytes.NewBuffer(b)
	return buf, nil
}

// encodeOutput makes one output frame of j's pieces: the piece itself
// when there is one, encoded with the writer's codec, else the pieces
// decoded and encoded again as one frame (a raw piece alone is encoded
// again too, to be compressed).
func (e *encoder) encodeOutput(j *encodeJob, res *encoded) error {
	if j.inPlace {
		k := j.pieces[0]
		res.inPlace, res.stats, res.crc, res.crcSet = &k, frame.Stats{Rows: k.rows, Bytes: k.bytes}, k.crc, true
		return nil
	}
	if len(j.pieces) == 1 && !j.pieces[0].raw {
		k := j.pieces[0]
		buf, err := pieceBytes(j.file, k)
		if err != nil {
			return err
		}
		j.pieces = nil // the buffer is the result's now
		res.buf, res.stats, res.crc, res.crcSet = buf, frame.Stats{Rows: k.rows, Bytes: k.bytes}, k.crc, true
		return nil
	}
	if e.dec == nil {
		d, err := frame.NewDecoder(e.schema)
		if err != nil {
			return err
		}
		e.dec = d
	}
	// The pieces' rows in order: the encoded ones decoded (together,
	// each stretch of them between kept rows), the kept rows as they
	// are; copied once, into the gatherer, or concatenated by Encode
	// where the schema has no gatherer.
	gather := e.gather
	if gather != nil {
		gather.Reset()
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
	frames := make([][]byte, 0, len(j.pieces))
	decode := func() error {
		if len(frames) == 0 {
			return nil
		}
		d, err := e.dec.DecodeAll(frames, e.parent)
		if err != nil {
			return fmt.Errorf("merge the %d frames kept for partition %d: %w", len(j.pieces), j.partition, err)
		}
		recs = append(recs, d...)
		frames = frames[:0]
		if gather != nil {
			for _, r := range d {
				if err := gather.Append(r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i, k := range j.pieces {
		if k.unencoded != nil {
			if err := decode(); err != nil {
				return err
			}
			if gather != nil {
				if err := gatherItems(gather, k.unencoded.items, k.unencoded.arena); err != nil {
					return err
				}
			} else {
				recs = append(recs, k.unencoded.records()...)
			}
			continue
		}
		buf, err := pieceBytes(j.file, k)
		if err != nil {
			return err
		}
		j.pieces[i].buf = nil // bufs returns it
		bufs = append(bufs, buf)
		b := buf.Bytes()
		if e.seal != nil {
			// The buffer is this merge's (bufs returns it): opened
			// where it lies.
			if k.piece {
				b, err = e.seal.OpenPieceInPlace(b, j.partition)
			} else {
				b, err = e.seal.OpenInPlace(b, j.partition)
			}
			if err != nil {
				return fmt.Errorf("merge the %d pieces kept for partition %d: one of %d bytes (spill offset %d when spilled): %w", len(j.pieces), j.partition, k.length, k.off, err)
			}
		}
		if !k.piece {
			frames = append(frames, b)
			continue
		}
		if err := decode(); err != nil {
			return err
		}
		if gather == nil {
			return fmt.Errorf("merge the %d pieces kept for partition %d: a piece of %d rows, and no gatherer for the schema", len(j.pieces), j.partition, k.rows)
		}
		if err := gather.AppendPiece(b); err != nil {
			return fmt.Errorf("merge the %d pieces kept for partition %d: piece of %d rows at offset %d of spill %s: %w", len(j.pieces), j.partition, k.rows, k.off, j.file.Name(), err)
		}
	}
	if err := decode(); err != nil {
		return err
	}
	out := recs
	if gather != nil {
		v := gather.View()
		if v != nil {
			defer v.Release()
		}
		out = []arrow.RecordBatch{v}
	}
	res.buf = bufPool.Get()
	var err error
	res.stats, err = e.enc.Encode(res.buf, out)
	return err
}
