package chunker

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/durashuffle/durashuffle/internal/entry"
	"github.com/durashuffle/durashuffle/internal/frame"
)

// budget counts the bytes a writer holds against coalesce_budget besides
// the rows it buffers. Its lock is the writer's main lock: it guards the
// budget and the coalescer, which counts the buffered rows and waits on
// room. The appender and the encoders (through a run's arena) reach only
// the budget, to give bytes back as frames leave memory and to read the
// index capacity reserved for them.
type budget struct {
	mu   sync.Mutex
	room *sync.Cond // bytes were given back, or the writer failed

	pending int64 // flushed frames not yet appended, and their runs' arenas
	keptMem int64 // a sorted writer's kept frames in memory
	fixed   int64 // per-partition state and the index's reserved capacity
	// indexCap is the frame index's capacity, counted in fixed: the
	// coalescer reserves it before it flushes the frames it is for, and
	// the appender grows its index (a sorted writer's kept frames) to it.
	indexCap int64
	// spilling: a sorted writer's kept frames go to its spill (a run
	// flushed before Close).
	spilling bool
	// reuse is the coalescer's arena, which takes back a finished run's
	// segments (counted in its Spare until it reuses them); nil once the
	// writer closes, when no run will.
	reuse *frame.Arena
}

func newBudget(opt Options) *budget {
	b := &budget{fixed: int64(opt.Partitions) * pbufSize}
	b.room = sync.NewCond(&b.mu)
	return b
}

// wake wakes every Write waiting for room: the writer failed.
func (b *budget) wake() {
	b.mu.Lock()
	b.room.Broadcast()
	b.mu.Unlock()
}

// giveBack takes held bytes of an appended frame out of pending and adds
// kept (a sorted writer's change in kept bytes in memory, either sign).
func (b *budget) giveBack(held, kept int64) {
	b.mu.Lock()
	b.pending -= held
	b.keptMem += kept
	b.room.Broadcast()
	b.mu.Unlock()
}

// reserved is the index capacity the coalescer reserved.
func (b *budget) reserved() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.indexCap
}

// isSpilling reports whether a sorted writer's frames go to its spill.
func (b *budget) isSpilling() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.spilling
}

// startOutput moves a sorted writer's kept bytes in memory to pending:
// they are its output jobs' now, given back as each is appended.
func (b *budget) startOutput() {
	b.mu.Lock()
	b.pending += b.keptMem
	b.keptMem = 0
	b.mu.Unlock()
}

// entrySize is what each frame's index entry costs until Close (the
// index is counted by its slice's capacity).
const entrySize = int64(unsafe.Sizeof(entry.Frame{}))

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

// indexGrowth is the bytes by which fixed grows once n more frames than
// are flushed so far are flushed: 0 while the reserved capacity holds
// them. Write makes room for it, as for the arena's next growth, before
// it takes rows that may open a frame. Under b.mu.
func (c *coalescer) indexGrowth(n int64) int64 {
	need := c.flushed + n
	if need <= c.b.indexCap {
		return 0
	}
	return (indexCapFor(c.b.indexCap, need) - c.b.indexCap) * entrySize
}

// reserveIndex counts in fixed the index capacity for the frames flushed
// so far, before the encoders see them; the appender grows its slice (a
// sorted writer's kept frames, whose entries are no larger) to exactly
// that capacity and counts nothing itself. Were the appender to count
// its own growth (a quarter of the index, tens of kilobytes at a few
// thousand frames), it would land while a flushed run still holds its
// budget in pending, and the writer would hold more than coalesce_budget
// until the run was appended; and a sorted writer's run boundaries would
// depend on how far the appender got. It fails the writer with errBudget
// once the index and the partitions' state leave less than an eighth of
// coalesce_budget (at least a frame) for rows: the room for rows is what
// a run holds, and below that runs would shrink toward a few rows each,
// every frame a few rows and an index entry of its own. The index grows
// by about one entry per partition per run, so the input a writer can
// take grows with the square of the budget. Under b.mu.
func (c *coalescer) reserveIndex() {
	b := c.b
	if c.flushed <= b.indexCap {
		return
	}
	n := indexCapFor(b.indexCap, c.flushed)
	b.fixed += (n - b.indexCap) * entrySize
	b.indexCap = n
	if room, least := c.limit-b.fixed, c.leastRoom(); room < least && c.ctx.Err() == nil {
		state := int64(c.partitions) * pbufSize
		c.cancel(fmt.Errorf("%w: after %d frames (%d bytes of input) the writer's frame index takes %d bytes (%d per frame, kept until Close) and its %d partitions' state %d bytes, leaving %d bytes of coalesce_budget (%d bytes) for rows, less than %d; past that every run would hold only a few rows. The index grows by about one frame per partition per run: raise coalesce_budget (doubling it lets a writer take about four times the input) or spread the output over more workers",
			errBudget, c.flushed, c.taken, n*entrySize, entrySize, c.partitions, state, max(room, 0), c.limit, least))
	}
}

// leastRoom is the room for rows a writer keeps within coalesce_budget:
// an eighth of it, at least a frame.
func (c *coalescer) leastRoom() int64 {
	return max(c.limit/8, min(c.frameTarget, c.limit/2))
}
