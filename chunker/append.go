package chunker

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/durashuffle/durashuffle/chunker/frame"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/manifest/entry"
	"github.com/durashuffle/durashuffle/store"
)

// entrySize is what each frame's index entry costs until Close (the
// index is counted by its slice's capacity).
const entrySize = int64(unsafe.Sizeof(entry.Frame{}))

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
			var mem int64 // change in a sorted writer's kept bytes in memory
			if r.buf != nil {
				kept := false
				if w.ctx.Err() == nil {
					var err error
					if w.sorted && !r.out {
						mem, kept, err = w.keepGuarded(r)
					} else {
						err = w.appendGuarded(r)
					}
					if err != nil {
						w.cancel(err)
					}
				}
				if !kept {
					bufPool.Put(r.buf)
				}
			}
			w.mu.Lock()
			w.pending -= r.held
			w.keptMem += mem
			w.inflight--
			w.outNext = next
			w.room.Broadcast()
			if w.outputting {
				w.work.Broadcast()
			}
			w.mu.Unlock()
		}
	}
}

// indexCapFor is the capacity the index grows to from c to hold need
// entries: doubled while small, then by about a quarter, as append grows
// a slice, so that a long index is copied a logarithmic number of times.
func indexCapFor(c, need int64) int64 {
	for c < need {
		if c < 256 {
			c = max(1, 2*c)
		} else {
			c += (c + 3*256) / 4
		}
	}
	return c
}

// indexGrowthLocked is the bytes by which fixed grows once n more frames
// than are flushed so far are flushed: 0 while the reserved capacity
// holds them. Write makes room for it, as for the arena's next growth,
// before it takes rows that may open a frame.
func (w *Writer) indexGrowthLocked(n int64) int64 {
	need := w.seq + n
	if need <= w.indexCap {
		return 0
	}
	return (indexCapFor(w.indexCap, need) - w.indexCap) * entrySize
}

// reserveIndexLocked counts in fixed the index capacity for the frames
// flushed so far (w.seq), before the encoders see them; the appender
// grows the slice (a sorted writer's kept frames, whose entries are no
// larger) to exactly that capacity and counts nothing itself. Were the
// appender to count its own growth (a quarter of the index, tens of
// kilobytes at a few thousand frames), it would land while a flushed run
// still holds its budget in pending, and the writer would hold more than
// coalesce_budget until the run was appended; and a sorted writer's run
// boundaries would depend on how far the appender got. It fails the
// writer with ErrBudget once the index and the partitions' state leave
// less than an eighth of coalesce_budget (at least a frame) for rows: the
// room for rows is what a run holds, and below that runs would shrink
// toward a few rows each, every frame a few rows and an index entry of
// its own. The index grows by about one entry per partition per run, so
// the input a writer can take grows with the square of the budget.
func (w *Writer) reserveIndexLocked() {
	if w.seq <= w.indexCap {
		return
	}
	c := indexCapFor(w.indexCap, w.seq)
	w.fixed += (c - w.indexCap) * entrySize
	w.indexCap = c
	if room, least := w.opt.CoalesceBudget-w.fixed, w.leastRoom(); room < least && w.ctx.Err() == nil {
		state := int64(w.opt.Partitions) * pbufSize
		w.cancel(fmt.Errorf("%w: after %d frames (%d bytes of input) the writer's frame index takes %d bytes (%d per frame, kept until Close) and its %d partitions' state %d bytes, leaving %d bytes of coalesce_budget (%d bytes) for rows, less than %d; past that every run would hold only a few rows. The index grows by about one frame per partition per run: raise coalesce_budget (doubling it lets a writer take about four times the input) or spread the output over more workers",
			ErrBudget, w.seq, w.taken, c*entrySize, entrySize, w.opt.Partitions, state, max(room, 0), w.opt.CoalesceBudget, least))
	}
}

// leastRoom is the room for rows a writer keeps within coalesce_budget:
// an eighth of it, at least a frame.
func (w *Writer) leastRoom() int64 {
	return max(w.opt.CoalesceBudget/8, min(w.opt.FrameTargetBytes, w.opt.CoalesceBudget/2))
}

// keepGuarded is keep with a panic turned into its error.
func (w *Writer) keepGuarded(r encoded) (mem int64, kept bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = safe.Recovered(v, "keep of a frame of partition %d", r.partition)
		}
	}()
	return w.keep(r)
}

// appendGuarded is appendFrame with a panic turned into its error.
func (w *Writer) appendGuarded(r encoded) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = safe.Recovered(v, "append of a frame of partition %d", r.partition)
		}
	}()
	return w.appendFrame(r)
}

func (w *Writer) appendFrame(r encoded) error {
	b := r.buf.Bytes()
	if w.objOff > 0 && w.objOff+int64(len(b)) > w.maxObject() {
		if err := w.endObject(); err != nil {
			return err
		}
	}
	if len(w.frames) == cap(w.frames) {
		// Write reserved the capacity before it flushed this frame.
		w.frames = growTo(w.frames, w.reservedCap())
	}
	w.frames = append(w.frames, entry.Frame{
		Partition: r.partition,
		Object:    w.obj,
		Offset:    w.objOff,
		Length:    int64(len(b)),
		Rows:      r.stats.Rows,
		Bytes:     r.stats.Bytes,
		CRC32C:    frameCRC(r, b),
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
	w.objects = append(w.objects, entry.Object{Size: w.objOff, Parts: int(w.part), CRC32C: w.objCRC})
	w.obj++
	w.part, w.objOff, w.objCRC = 0, 0, 0
	return err
}

func (w *Writer) dropCurrent() {
	if w.cur != nil {
		w.sink.Release(w.cur)
		w.cur = nil
	}
}

// frameCRC is the CRC32C of a frame's stored bytes b: taken when it was
// kept, for a frame copied from a sorted writer's run.
func frameCRC(r encoded, b []byte) uint32 {
	if r.crcSet {
		return r.crc
	}
	return store.CRC32C(b)
}

// reservedCap is the index capacity Write reserved.
func (w *Writer) reservedCap() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.indexCap
}

// growTo returns s with capacity c (at least one more than its length).
func growTo[T any](s []T, c int64) []T {
	out := make([]T, len(s), max(c, int64(len(s))+1))
	copy(out, s)
	return out
}
