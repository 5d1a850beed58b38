package chunker

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/durashuffle/durashuffle/chunker/frame"
)

// item is a piece of a partition's frame, in write order: a batch the
// writer retains, or rows [lo, hi) of segment seg of the run's arena.
type item struct {
	rec    arrow.RecordBatch
	seg    int
	lo, hi int64
}

// runArena is a run's arena, shared by the frames of the run: the last
// of them to be encoded releases it.
// Its memory is counted in the writer's pending bytes until then, as a
// whole: a frame's share cannot be given back while the other frames of
// the run still need the segments.
type runArena struct {
	w    *Writer
	segs []arrow.RecordBatch
	run  *frame.ArenaRun // the segments, for the writer's arena to reuse
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
	// Every frame of the run is encoded: nothing reads the segments, and
	// the writer's next runs fill them again; after the last run, none
	// will.
	if !a.w.closed {
		a.w.arena.Recycle(a.run)
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

func (w *Writer) setSchemaLocked(s *arrow.Schema) {
	w.schema = s
	w.arena, _ = frame.NewArena(s)
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
//
// Room means room for what taking rec may add besides its rows: the
// arena's next growth, and the index entries of the frames buffered so
// far and of the one rec may open (indexGrowthLocked), which are counted
// in fixed when their run is flushed. So a run's flush never takes the
// writer past coalesce_budget, and neither does the appender, which
// counts nothing of its own: from one Write to the next, what the writer
// counts only falls (but for a sorted writer's frames kept in memory,
// which go to disk once they would pass it).
func (w *Writer) addLocked(partition int, rec arrow.RecordBatch, size int64, perByte float64) error {
	// The arena's recycled segments count too, and are the first thing
	// given up for room: they only spare the allocator work.
	for {
		over := w.buffered + w.pending + w.keptMem + w.fixed + w.arena.Spare() + w.arena.Growth() + w.indexGrowthLocked(w.unflushed+1) - w.opt.CoalesceBudget
		if over <= 0 {
			break
		}
		if w.arena.Spare() > 0 {
			w.arena.DropSpare(over)
			continue
		}
		if w.pending == 0 {
			break
		}
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
	if len(f.items) == 0 {
		w.unflushed++ // both ways below give f an item
	}
	n := rec.NumRows()
	copied := false
	if w.arena != nil && size < w.opt.FrameTargetBytes/4 {
		si, lo, grew, err := w.arena.Append(rec)
		w.buffered += grew
		if err == nil {
			copied = true
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
			w.inflight++
			w.unflushed--
			w.reserveIndexLocked()
			w.buffered -= f.held
			w.pending += f.held
			w.work.Signal()
		} else {
			p.done = append(p.done, *f)
		}
		*f = pframe{}
	}
	// The arena's next growth and the index of the run's frames (and of
	// the next write's) must fit too, or the run flushes now. All of it
	// is known here, from the input alone, not from how far the encoders
	// and the appender got: a sorted writer's same input makes the same
	// object. Its frames kept in memory count too, but when they would
	// pass the budget they go to disk, which moves no run boundary.
	if w.buffered+w.fixed+w.arena.Growth()+w.indexGrowthLocked(w.unflushed+1) >= w.opt.CoalesceBudget {
		w.runLocked()
	} else if w.sorted && !w.spilling && w.buffered+w.keptMem+w.fixed+w.arena.Growth() >= w.opt.CoalesceBudget {
		w.spilling = true
	}
	return nil
}

// finishArenaLocked ends the run's arena: its segments as batches, and a
// fresh first segment shaped like the last one.
func (w *Writer) finishArenaLocked() (*runArena, int64) {
	// The segments, index for index with those items name (nil: no rows).
	segs, held, run := w.arena.Finish()
	if segs == nil {
		return nil, 0
	}
	ra := &runArena{w: w, segs: segs, run: run, held: held}
	ra.refs.Store(1) // the run's own, dropped once every job took one
	w.pending += ra.held
	return ra, ra.held
}

// runLocked flushes every partition's frames, in partition order, to the
// encoders: one sorted run. A sorted writer's run before Close starts
// its spill: from then on its frames are kept on disk, and those under
// half of frame_target_bytes, which Close merges with the partition's
// other pieces, are spilled uncompressed (raw).
func (w *Writer) runLocked() {
	if w.sorted && !w.closed {
		w.spilling = true
	}
	if w.closed {
		// The last run: no other will take the spare segments, and a
		// sorted writer's Close needs the memory for its output.
		w.arena.DropSpare(w.arena.Spare())
	}
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
			j := encodeJob{seq: w.seq, partition: i, held: f.held, items: f.items, raw: w.spilling && w.codec != frame.None && f.bytes < w.opt.FrameTargetBytes/2}
			if f.arena > 0 {
				arena.refs.Add(1)
				j.arena = arena
			}
			w.seq++
			w.inflight++
			held += j.held
			w.queue = append(w.queue, j)
		}
		*p = pbuf{}
	}
	w.unflushed = 0
	w.reserveIndexLocked()
	w.pending += held
	w.buffered = 0
	w.runs++
	w.work.Broadcast()
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
	w.unflushed = 0
	if arena, _ := w.finishArenaLocked(); arena != nil {
		arena.releaseLocked()
	}
	w.buffered = 0
}
