package chunker

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/durashuffle/durashuffle/internal/frame"
)

// coalescer buffers the rows Write takes, per partition, and flushes
// them to the job queue: a frame of retained batches as soon as it is
// full, and every partition's frames at once, in partition order, as a
// run when the buffers fill coalesce_budget. It is guarded by its
// budget's lock (b.mu), which Write, Close and Abort hold around every
// call; no goroutine of the writer's own touches it.
type coalescer struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	b      *budget   // the bytes counted besides the rows; its lock guards the coalescer
	q      *jobQueue // where flushed frames go

	partitions  int
	frameTarget int64 // frame_target_bytes
	limit       int64 // coalesce_budget
	sorted      bool  // Options.Spill set
	compresses  bool  // frames are compressed: a sorted writer spills small ones raw

	schema *arrow.Schema
	parts  []pbuf
	arena  *frame.Arena // the run's arena; nil when the schema's types are not copied
	// buffered is the bytes held by the partitions' buffers and the
	// arena.
	buffered int64
	// unflushed is the frames buffered in the partitions, not yet
	// flushed; flushed, the frames flushed to the job queue so far.
	unflushed, flushed int64
	taken              int64 // logical bytes written so far
	runs               int
	closed             bool // Close or Abort began: no more rows
}

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
	b    *budget
	segs []arrow.RecordBatch
	run  *frame.ArenaRun // the segments, for the writer's arena to reuse
	held int64
	refs atomic.Int64
}

func (a *runArena) release() {
	if a.refs.Add(-1) == 0 {
		a.b.mu.Lock()
		a.freeLocked()
		a.b.mu.Unlock()
	}
}

// releaseLocked is release with the budget's lock held.
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
	if a.b.reuse != nil {
		a.b.reuse.Recycle(a.run)
	}
	a.b.pending -= a.held
	a.b.room.Broadcast()
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

// copiedUnder: a batch of frame_target_bytes / copiedUnder logical bytes
// (64 KiB by default) or more is retained as it is, where the Go objects
// of its arrays (a few KiB) are a small share and copying it would cost
// more than it saves. A smaller one is retained too when that holds at
// most half again its logical bytes (retains), and is copied into the
// run's arena otherwise, where its rows cost only their bytes: a batch
// of a few rows, whose arrays' Go objects outweigh it, or a slice of a
// caller's batch with much spare capacity, whose buffers it would keep.
// Copying costs two more passes over the rows (into the arena, and out
// of it into their frame) through memory the size of the run, and a
// frame of arena rows waits for its run, where a frame of retained
// batches is encoded as soon as it is full.
const copiedUnder = 16

// retains reports whether a batch of size logical bytes under
// frame_target_bytes / copiedUnder is retained rather than copied: when
// what retaining it is charged (its buffers' share, perByte per logical
// byte, 0 if not known yet, and objects for its Go objects) is at most
// 1.5 times size. perByte is returned, measured if it was not known.
func retains(rec arrow.RecordBatch, size, objects int64, perByte float64) (bool, float64) {
	if 2*objects > size {
		return false, perByte // held is at least size + objects, past 1.5 size
	}
	if perByte == 0 {
		perByte = heldPerLogical(rec)
	}
	return float64(size)*perByte+float64(objects) <= 1.5*float64(size), perByte
}

// itemSize is what each item costs in its frame's list.
const itemSize = int64(unsafe.Sizeof(item{}))

func (c *coalescer) setSchema(s *arrow.Schema) {
	c.schema = s
	c.arena, _ = frame.NewArena(s)
	c.b.reuse = c.arena
	c.q.setSchema(s)
}

// write buffers rec (size logical bytes) in partition.
func (c *coalescer) write(partition int, rec arrow.RecordBatch, size int64) error {
	if err := c.accept(rec, partition); err != nil {
		return err
	}
	c.taken += size
	// A batch larger than a frame is cut into frame-sized slices, so a
	// reader never needs more than a frame's bytes to decode one.
	if size > c.frameTarget && rec.NumRows() > 1 {
		perByte := heldPerLogical(rec)
		n := rec.NumRows()
		step := max(1, (n*c.frameTarget+size-1)/size)
		for lo := int64(0); lo < n; lo += step {
			s := rec.NewSlice(lo, min(lo+step, n))
			err := c.add(partition, s, frame.LogicalSize(s), perByte)
			s.Release()
			if err != nil {
				return err
			}
		}
		return nil
	}
	return c.add(partition, rec, size, 0)
}

// accept checks that the writer takes rows and that rec has its schema
// (the first batch's, when none was given). partition names the batch
// in the error; -1: a batch of many partitions.
func (c *coalescer) accept(rec arrow.RecordBatch, partition int) error {
	if c.closed {
		return ErrClosed
	}
	if c.schema == nil {
		c.setSchema(rec.Schema())
	} else if c.schema != rec.Schema() && !c.schema.Equal(rec.Schema()) {
		what := fmt.Sprintf("partition %d", partition)
		if partition < 0 {
			what = "a partitioned batch"
		}
		return fmt.Errorf("%w: %s got %s, want %s", ErrSchema, what, rec.Schema(), c.schema)
	}
	return nil
}

// add buffers rec (size logical bytes) in partition, once the budget has
// room. perByte is the held bytes per logical byte of rec if the caller
// knows it (0: measure).
//
// Room means room for what taking rec may add besides its rows: the
// arena's next growth, and the index entries of the frames buffered so
// far and of the one rec may open (indexGrowth), which are counted in
// fixed when their run is flushed. So a run's flush never takes the
// writer past coalesce_budget, and neither does the appender, which
// counts nothing of its own: from one Write to the next, what the writer
// counts only falls (but for a sorted writer's frames kept in memory,
// which go to disk once they would pass it).
func (c *coalescer) add(partition int, rec arrow.RecordBatch, size int64, perByte float64) error {
	if err := c.waitRoom(); err != nil {
		return err
	}
	p := &c.parts[partition]
	f := &p.open
	if len(f.items) == 0 {
		c.unflushed++ // both ways below give f an item
	}
	objects := objectsHeld(rec)
	copied := false
	if size < c.frameTarget/copiedUnder {
		var keep bool
		keep, perByte = retains(rec, size, objects, perByte)
		copied = !keep && c.copyRows(f, rec, size)
	}
	if !copied {
		if perByte == 0 {
			perByte = heldPerLogical(rec)
		}
		rec.Retain()
		h := int64(float64(size)*perByte) + objects + itemSize
		f.items = append(f.items, item{rec: rec})
		f.held += h
		c.buffered += h
	}
	f.bytes += size
	c.filled(partition)
	return nil
}

// filled flushes what the rows just added to partition's open frame
// call for: the frame, once it is full of retained batches, or the run,
// once the buffers fill the budget.
func (c *coalescer) filled(partition int) {
	c.frameFull(partition)
	c.runDue()
}

// frameFull ends partition's open frame once it holds frame_target_bytes:
// a frame of retained batches goes to the encoders now, unless frames of
// the partition wait for the run before it (its rows would be stored
// ahead of theirs); one with arena rows waits for its run.
func (c *coalescer) frameFull(partition int) {
	p := &c.parts[partition]
	f := &p.open
	if f.bytes >= c.frameTarget {
		if f.arena == 0 && len(p.done) == 0 {
			// A full frame of retained batches needs nothing from the
			// run: it is encoded and uploaded now, while input still
			// arrives (a frame of a full frame_target_bytes costs a GET
			// of its own well spent).
			c.flushed++
			c.unflushed--
			c.reserveIndex()
			c.buffered -= f.held
			c.b.pending += f.held
			c.q.push(encodeJob{partition: partition, items: f.items, held: f.held})
		} else {
			p.done = append(p.done, *f)
		}
		*f = pframe{}
	}
}

// runDue flushes the run once the buffers fill the budget.
func (c *coalescer) runDue() {
	// The arena's next growth and the index of the run's frames (and of
	// the next write's) must fit too, or the run flushes now. All of it
	// is known here, from the input alone, not from how far the encoders
	// and the appender got: a sorted writer's same input makes the same
	// object. Its frames kept in memory count too, but when they would
	// pass the budget they go to disk, which moves no run boundary.
	if c.buffered+c.b.fixed+c.arena.Growth()+c.indexGrowth(c.unflushed+1) >= c.limit {
		c.run()
	} else if c.sorted && !c.b.spilling && c.buffered+c.b.keptMem+c.b.fixed+c.arena.Growth() >= c.limit {
		c.b.spilling = true
	}
}

// waitRoom waits until the budget has room for another write, or the
// writer fails.
func (c *coalescer) waitRoom() error {
	b := c.b
	// The arena's recycled segments count too, and are the first thing
	// given up for room: they only spare the allocator work.
	for {
		over := c.buffered + b.pending + b.keptMem + b.fixed + c.arena.Spare() + c.arena.Growth() + c.indexGrowth(c.unflushed+1) - c.limit
		if over <= 0 {
			break
		}
		if c.arena.Spare() > 0 {
			c.arena.DropSpare(over)
			continue
		}
		if b.pending == 0 {
			break
		}
		if c.ctx.Err() != nil {
			break
		}
		b.room.Wait()
	}
	if c.ctx.Err() != nil {
		return context.Cause(c.ctx)
	}
	return nil
}

// copyRows copies rec's rows into the run's arena as an item of f, and
// reports whether it did (false: no arena, or the arena refused them).
func (c *coalescer) copyRows(f *pframe, rec arrow.RecordBatch, size int64) bool {
	if c.arena == nil {
		return false
	}
	n := rec.NumRows()
	si, lo, grew, err := c.arena.Append(rec)
	c.buffered += grew
	if err != nil {
		return false
	}
	c.arenaItem(f, si, lo, lo+n, size)
	return true
}

// arenaItem adds rows [lo, hi) of arena segment seg (size logical bytes)
// to frame f, as an item of their own or the end of its last one.
func (c *coalescer) arenaItem(f *pframe, seg int, lo, hi, size int64) {
	f.arena += size
	if k := len(f.items); k > 0 && f.items[k-1].rec == nil && f.items[k-1].seg == seg && f.items[k-1].hi == lo {
		f.items[k-1].hi = hi // the partition's last write is contiguous
	} else {
		f.items = append(f.items, item{seg: seg, lo: lo, hi: hi})
		f.held += itemSize
		c.buffered += itemSize
	}
}

// finishArena ends the run's arena: its segments as batches, counted in
// pending, and a fresh first segment shaped like the last one.
func (c *coalescer) finishArena() *runArena {
	// The segments, index for index with those items name (nil: no rows).
	segs, held, run := c.arena.Finish()
	if segs == nil {
		return nil
	}
	ra := &runArena{b: c.b, segs: segs, run: run, held: held}
	ra.refs.Store(1) // the run's own, dropped once every job took one
	c.b.pending += ra.held
	return ra
}

// run flushes every partition's frames, in partition order, to the
// encoders: one sorted run. A sorted writer's run before Close starts
// its spill: from then on its frames are kept on disk, and those under
// half of frame_target_bytes, which Close merges with the partition's
// other pieces, are spilled raw (as pieces, not frames).
func (c *coalescer) run() {
	if c.sorted && !c.closed {
		c.b.spilling = true
	}
	if c.closed {
		// The last run: no other will take the spare segments, and a
		// sorted writer's Close needs the memory for its output.
		c.arena.DropSpare(c.arena.Spare())
	}
	arena := c.finishArena()
	if arena != nil {
		defer arena.releaseLocked()
	}
	raw := c.b.spilling && c.compresses
	// A sorted writer's last run after spilled ones: its small frames
	// are not encoded now but kept as rows (the run's arena or retained
	// batches) until Close merges them with their partition's spilled
	// pieces, so their rows are encoded once, into the output frame.
	keepRows := c.sorted && c.closed && c.runs > 0
	jobs := make([]encodeJob, 0, c.unflushed)
	var held int64
	for i := range c.parts {
		p := &c.parts[i]
		if n := len(p.done); n > 0 && len(p.open.items) > 0 && p.open.bytes < c.frameTarget/4 {
			// A short end of a partition's rows joins its last frame
			// (at most 1.25 frames) rather than make a small frame of
			// its own, which Close would merge by decoding its
			// neighbour or leave small.
			d := &p.done[n-1]
			d.items = append(d.items, p.open.items...)
			d.bytes += p.open.bytes
			d.arena += p.open.arena
			d.held += p.open.held
		} else if len(p.open.items) > 0 {
			p.done = append(p.done, p.open)
		}
		for _, f := range p.done {
			small := f.bytes < c.frameTarget/2
			j := encodeJob{partition: i, held: f.held, items: f.items, raw: raw && small, keepRows: keepRows && small, bytes: f.bytes}
			if f.arena > 0 {
				arena.refs.Add(1)
				j.arena = arena
			}
			held += j.held
			jobs = append(jobs, j)
		}
		*p = pbuf{}
	}
	c.flushed += int64(len(jobs))
	c.unflushed = 0
	c.reserveIndex()
	c.b.pending += held
	c.buffered = 0
	c.runs++
	c.q.pushAll(jobs)
}

// last ends the writing phase with the last run. Its frames stay in
// memory, with no more input to share the budget with.
func (c *coalescer) last() {
	c.closed = true
	c.b.reuse = nil
	c.b.spilling = false
	c.run()
}

// drop ends the writing phase and releases every buffered row.
func (c *coalescer) drop() {
	c.closed = true
	c.b.reuse = nil
	for i := range c.parts {
		p := &c.parts[i]
		for _, f := range append(p.done, p.open) {
			(&encodeJob{items: f.items}).release()
		}
		*p = pbuf{}
	}
	c.unflushed = 0
	if arena := c.finishArena(); arena != nil {
		arena.releaseLocked()
	}
	c.buffered = 0
}
