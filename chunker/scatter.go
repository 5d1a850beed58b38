package chunker

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/durashuffle/durashuffle/internal/arrowcheck"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/partition"
)

// scratch is a scatter's row order, reused from batch to batch.
type scratch struct {
	parts, starts, rows []int32
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// WritePartitioned adds every row of rec to its partition: row i to
// partitions[i]. It is Write for a batch whose rows go to many
// partitions, and costs about one copy of the rows: each partition's
// rows are gathered from rec into the run's arena (or, for a partition
// that takes a large share of the batch, into a dense batch of its own),
// never cut into a slice per partition. Rows keep their input order
// within each partition. The caller keeps its reference to rec and to
// partitions.
//
// The batch is validated as Write validates it, and partitions must hold
// one partition in [0, Options.Partitions) per row of rec; otherwise
// nothing is taken and the error wraps ErrBatch, or ErrPartition naming
// the row, its partition and the count (or both lengths). Once taking
// began, only the writer's own failure stops it.
func (w *Writer) WritePartitioned(rec arrow.RecordBatch, partitions []int32) error {
	if err := w.err(); err != nil {
		return err
	}
	if err := validateBatch(rec); err != nil {
		return fmt.Errorf("partitioned batch: %w", err)
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	return w.scatter(rec, partitions, sc)
}

// WriteKeyed adds every row of rec to the partition of its value in
// column key, by package partition's hash (docs/partitioning.md): the
// same value to the same partition whatever its encoding. It is
// WritePartitioned with partition.Assign's vector, and fails as it
// does, or with an error naming the column when the column is out of
// range or of a type with no partitioning key (nothing is taken then).
func (w *Writer) WriteKeyed(rec arrow.RecordBatch, key int) error {
	if err := w.err(); err != nil {
		return err
	}
	if err := validateBatch(rec); err != nil {
		return fmt.Errorf("keyed batch: %w", err)
	}
	if key < 0 || int64(key) >= rec.NumCols() {
		return fmt.Errorf("key column %d is out of range: the batch has %d columns", key, rec.NumCols())
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	var err error
	if sc.parts, err = partition.Assign(rec.Column(key), w.opt.Partitions, sc.parts); err != nil {
		return fmt.Errorf("key column %d %q: %w", key, rec.ColumnName(key), err)
	}
	return w.scatter(rec, sc.parts, sc)
}

// scatterShare: a scatter copies a batch's rows into the run's arena in
// pieces of at most about 1/scatterShare of coalesce_budget.
const scatterShare = 4

// errNoArena: the writer's schema has a type its arena does not copy;
// the rows are selected into batches instead.
var errNoArena = errors.New("no arena for the schema")

// scatter takes the rows of a validated batch into their partitions.
func (w *Writer) scatter(rec arrow.RecordBatch, partitions []int32, sc *scratch) error {
	if err := partition.Check(partitions, int(rec.NumRows()), w.opt.Partitions); err != nil {
		return fmt.Errorf("%w: %w", ErrPartition, err)
	}
	if rec.NumRows() == 0 {
		return nil
	}
	sc.starts, sc.rows = partition.Group(partitions, w.opt.Partitions, sc.starts, sc.rows)
	if p := int(partitions[0]); sc.starts[p+1]-sc.starts[p] == int32(len(partitions)) {
		return w.writeValid(p, rec) // every row in one partition: the batch as it is
	}
	if nrec, changed := arrowcheck.NormalizeBatch(rec); changed {
		defer nrec.Release()
		rec = nrec
	}
	size := frame.LogicalSize(rec)
	err := w.guarded(func() string { return fmt.Sprintf("scatter of %d rows", rec.NumRows()) }, func() error {
		if err := w.co.accept(rec, -1); err != nil {
			return err
		}
		if w.co.arena == nil {
			return errNoArena
		}
		return w.co.scatter(rec, size, sc.starts, sc.rows)
	})
	if errors.Is(err, errNoArena) {
		return w.scatterSelected(rec, partitions)
	}
	return err
}

// scatterSelected writes each partition's rows as a batch of their own,
// selected outside the writer's lock: for a schema whose types the arena
// does not copy.
func (w *Writer) scatterSelected(rec arrow.RecordBatch, partitions []int32) error {
	parts, err := partition.Split(rec, partitions, w.opt.Partitions, w.opt.Mem)
	if err != nil {
		return err
	}
	defer func() {
		for _, r := range parts {
			if r != nil {
				r.Release()
			}
		}
	}()
	for p, r := range parts {
		if r == nil {
			continue
		}
		if err := w.writeValid(p, r); err != nil {
			return err
		}
	}
	return nil
}

// scatter buffers the rows of rec (size logical bytes) in their
// partitions: rows[starts[p]:starts[p+1]] are partition p's. A partition
// that takes a large share of the batch (what Write would retain rather
// than copy) becomes a dense batch of its own, retained, so that a frame
// full of such batches is encoded without waiting for its run. The rows
// of the others are copied into the run's arena at once, in partition
// order, one gather per column for the whole batch: each partition's
// rows are then one contiguous item of its frame.
func (c *coalescer) scatter(rec arrow.RecordBatch, size int64, starts, rows []int32) error {
	n := rec.NumRows()
	var large []int32
	for p := range c.partitions {
		if k := int64(starts[p+1] - starts[p]); k > 0 && shareOf(size, k, n) >= c.frameTarget/copiedUnder {
			large = append(large, int32(p))
		}
	}
	// The other partitions' rows are copied in pieces of whole
	// partitions, each at most about 1/scatterShare of coalesce_budget,
	// so that a large batch is copied within the budget, flushing runs
	// between pieces, rather than all at once.
	piece := c.limit / scatterShare
	var small []int32
	lo := 0
	for p := range c.partitions {
		if !slices.Contains(large, int32(p)) {
			if len(large) == 0 {
				small = rows[starts[lo]:starts[p+1]]
			} else {
				small = append(small, rows[starts[p]:starts[p+1]]...)
			}
		}
		est := shareOf(size, int64(len(small)), n)
		if p+1 < c.partitions && est < piece {
			continue
		}
		if len(small) > 0 {
			if err := c.addArenaRows(rec, est, starts, small, large, lo, p+1); err != nil {
				return err
			}
		}
		lo, small = p+1, small[:0]
	}
	for _, p := range large {
		if err := c.addSelected(int(p), rec, rows[starts[p]:starts[p+1]]); err != nil {
			return err
		}
	}
	return nil
}

// addArenaRows copies the rows of rec at small (est logical bytes) into
// the run's arena, once the budget has room, and adds each partition's
// (those of starts in [pLo, pHi) not in large, in partition order) to
// its open frame, their logical bytes apportioned by rows. The run
// flushes first if the rows would not fit beside it, and after, if the
// buffers are full.
func (c *coalescer) addArenaRows(rec arrow.RecordBatch, est int64, starts, small, large []int32, pLo, pHi int) error {
	if err := c.waitRoom(); err != nil {
		return err
	}
	touched := int64(pHi - pLo)
	for _, p := range large {
		if int(p) >= pLo && int(p) < pHi {
			touched--
		}
	}
	if c.buffered > 0 && c.buffered+c.b.fixed+est+c.arena.Growth()+c.indexGrowth(c.unflushed+touched) >= c.limit {
		c.run()
		if err := c.waitRoom(); err != nil {
			return err
		}
	}
	seg, lo, grew, added, err := c.arena.AppendRows(rec, small)
	c.buffered += grew
	at, total := int64(0), int64(len(small))
	for p := pLo; p < pHi; p++ {
		k := int64(starts[p+1] - starts[p])
		if k == 0 || slices.Contains(large, int32(p)) {
			continue
		}
		if err != nil {
			// The arena holds as much as one accumulation may: each
			// partition's rows go as a batch of their own.
			if err := c.addSelected(p, rec, small[at:at+k]); err != nil {
				return err
			}
			at += k
			continue
		}
		f := &c.parts[p].open
		if len(f.items) == 0 {
			c.unflushed++
		}
		sz := shareOf(added, at+k, total) - shareOf(added, at, total)
		c.taken += sz
		c.arenaItem(f, seg, lo+at, lo+at+k, sz)
		f.bytes += sz
		c.frameFull(p)
		at += k
	}
	if err == nil {
		c.runDue()
	}
	return nil
}

// addSelected buffers the rows of rec at rows in partition as a dense
// batch of their own, retained as Write retains a caller's.
func (c *coalescer) addSelected(partition int, rec arrow.RecordBatch, rows []int32) error {
	acc, _ := frame.NewAccumulator(c.schema)
	if err := acc.AppendRows(rec, rows); err != nil {
		return fmt.Errorf("select the %d rows of partition %d: %w", len(rows), partition, err)
	}
	sel := acc.Finish()
	defer sel.Release()
	return c.write(partition, sel, frame.LogicalSize(sel))
}

// shareOf is bytes x k / n, for k of n rows (0 <= k <= n, n > 0),
// without overflow whatever the bytes.
func shareOf(bytes, k, n int64) int64 {
	hi, lo := bits.Mul64(uint64(bytes), uint64(k))
	q, _ := bits.Div64(hi, lo, uint64(n))
	return int64(q)
}
