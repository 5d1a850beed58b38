package frame

import "github.com/apache/arrow-go/v18/arrow"

// arenaSegment is the bytes after which an Arena starts a new segment: a
// segment grows (copying its buffers as Go grows a slice) only up to
// this, and the next one starts with the capacity the last one reached,
// so rows are copied into the arena once, not again at every growth.
const arenaSegment = 1 << 20

// Arena is an Accumulator in segments: the rows of many small batches
// copied into dense column buffers, where a full segment stops growing
// and the next starts at its size. A writer keeps one per run and hands
// the finished segments to the frames that name rows of them. Its
// memory is plain Go memory, counted exactly by what Append and Finish
// report. Not safe for concurrent use.
type Arena struct {
	segs []*Accumulator // the last one grows
	// spare: emptied segments of finished runs (Recycle), whose buffers
	// the next segments take instead of allocating new ones.
	spare     []*Accumulator
	spareHeld int64 // their bytes
}

// ArenaRun is a finished run of an Arena: the segments its batches point
// into, for Recycle.
type ArenaRun struct {
	accs []*Accumulator
}

// NewArena returns an arena for schema, or false when a column's type is
// one an Accumulator does not copy (see NewAccumulator).
func NewArena(schema *arrow.Schema) (*Arena, bool) {
	seg, ok := NewAccumulator(schema)
	if !ok {
		return nil, false
	}
	return &Arena{segs: []*Accumulator{seg}}, true
}

// Append copies rec's rows into the growing segment, starting a new one
// when it is full, and returns where they are: rows [lo, lo+rec.NumRows())
// of segment seg. grew is the bytes the arena's memory grew by, also
// when Append fails (a new segment may have started); on failure no row
// is taken (see Accumulator.Append).
func (a *Arena) Append(rec arrow.RecordBatch) (seg int, lo, grew int64, err error) {
	seg, lo, grew, _, err = a.appendWith(func(cur *Accumulator) error { return cur.Append(rec) })
	return seg, lo, grew, err
}

// AppendRows is Append of the rows of rec at rows (see
// Accumulator.AppendRows), which land in the arena as rows [lo,
// lo+len(rows)) of segment seg. It also returns added, the bytes the
// rows take in the arena's buffers: their logical size.
func (a *Arena) AppendRows(rec arrow.RecordBatch, rows []int32) (seg int, lo, grew, added int64, err error) {
	return a.appendWith(func(cur *Accumulator) error { return cur.AppendRows(rec, rows) })
}

// appendWith runs add on the growing segment, starting a new one first
// when it is full.
func (a *Arena) appendWith(add func(cur *Accumulator) error) (seg int, lo, grew, added int64, err error) {
	seg = len(a.segs) - 1
	if cur := a.segs[seg]; cur.Used() >= arenaSegment {
		var next *Accumulator
		if n := len(a.spare); n > 0 {
			// A recycled segment's buffers, each cut to the capacity
			// NewLike gives: the arena grows and counts exactly as with
			// new ones, so a run's boundaries do not depend on whether
			// an earlier run had been encoded yet.
			a.spareHeld -= a.spare[n-1].Held()
			next = cur.likeFrom(a.spare[n-1])
			a.spare[n-1] = nil
			a.spare = a.spare[:n-1]
		} else {
			next = cur.NewLike()
		}
		grew += next.Held()
		a.segs = append(a.segs, next)
		seg++
	}
	cur := a.segs[seg]
	before, used := cur.Held(), cur.Used()
	lo = cur.Rows()
	if err = add(cur); err != nil {
		return seg, lo, grew, 0, err
	}
	return seg, lo, grew + cur.Held() - before, cur.Used() - used, nil
}

// Growth is what the arena's next growth may take: Go grows a large
// slice by a quarter, so a quarter of the growing segment. Zero for a
// nil arena.
func (a *Arena) Growth() int64 {
	if a == nil || len(a.segs) == 0 {
		return 0
	}
	return a.segs[len(a.segs)-1].Held() / 4
}

// Finish returns the arena's segments as batches, in the order Append
// numbered them (nil for a segment without rows), the bytes they hold,
// and the run to hand to Recycle once nothing uses the batches any more;
// nil, 0 and nil when the arena holds no rows. The batches point into
// the segments' buffers: the arena starts again with one empty segment
// shaped like its last.
func (a *Arena) Finish() ([]arrow.RecordBatch, int64, *ArenaRun) {
	if a == nil || len(a.segs) == 0 || a.segs[0].Rows() == 0 {
		return nil, 0, nil
	}
	var (
		segs []arrow.RecordBatch
		held int64
	)
	for _, seg := range a.segs {
		held += seg.Held()
		segs = append(segs, seg.View())
	}
	run := &ArenaRun{accs: a.segs}
	a.segs = []*Accumulator{a.segs[len(a.segs)-1].emptyLike()}
	return segs, held, run
}

// Recycle takes back a finished run's segments, once the batches Finish
// returned for it are released and nothing reads them: the next
// segments reuse their buffers instead of allocating (and the runtime
// zeroing) new ones. At most one run's segments are kept: the rest are
// left to the collector.
func (a *Arena) Recycle(r *ArenaRun) {
	if a == nil || r == nil {
		return
	}
	for i, acc := range r.accs {
		if i == 0 {
			// The run's first segment grew from nothing; the next
			// run's first does too (emptyLike), so it is no use.
			continue
		}
		acc.Reset()
		a.spare = append(a.spare, acc)
		a.spareHeld += acc.Held()
	}
	if extra := len(a.spare) - (len(r.accs) - 1); extra > 0 {
		a.dropFirst(extra)
	}
}

// Spare is the bytes of the recycled segments the arena keeps for its
// next ones: memory its writer still holds. Zero for a nil arena.
func (a *Arena) Spare() int64 {
	if a == nil {
		return 0
	}
	return a.spareHeld
}

// DropSpare lets the collector have recycled segments holding at least
// n bytes, or all of them.
func (a *Arena) DropSpare(n int64) {
	if a == nil {
		return
	}
	k := 0
	for k < len(a.spare) && n > 0 {
		n -= a.spare[k].Held()
		k++
	}
	a.dropFirst(k)
}

// dropFirst lets the collector have the k oldest spare segments.
func (a *Arena) dropFirst(k int) {
	for _, s := range a.spare[:k] {
		a.spareHeld -= s.Held()
	}
	clear(a.spare[:k])
	a.spare = append(a.spare[:0], a.spare[k:]...)
}

// Held is the bytes the arena's segments occupy.
func (a *Arena) Held() int64 {
	var n int64
	if a != nil {
		for _, seg := range a.segs {
			n += seg.Held()
		}
	}
	return n
}
