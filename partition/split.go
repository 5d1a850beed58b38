package partition

import (
	"context"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Split returns the rows of rec by partition: parts[p] holds, in input
// order, the rows i with partitions[i] == p, or is nil when there are
// none; len(parts) is count. A partition that takes every row gets rec
// itself (retained); the others get new batches. The caller releases
// every batch. partitions holds one partition per row, each in [0,
// count): otherwise Split fails naming the row, its value and the count,
// or both lengths. mem allocates the new batches (nil: Go's memory).
//
// Every column is carried, of any type: the columns Arrow's take kernel
// has a kernel for are selected with it, and the others (views, run-end
// encoded, unions, and the nested types holding one) row run by row run.
// Views are copied value by value, so that a partition holds only its
// own rows' bytes.
func Split(rec arrow.RecordBatch, partitions []int32, count int, mem memory.Allocator) ([]arrow.RecordBatch, error) {
	if err := Check(partitions, int(rec.NumRows()), count); err != nil {
		return nil, err
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	starts, rows := Group(partitions, count, nil, nil)
	parts := make([]arrow.RecordBatch, count)
	s := selector{mem: mem}
	for p := range count {
		lo, hi := starts[p], starts[p+1]
		switch {
		case hi == lo:
			continue
		case int64(hi-lo) == rec.NumRows():
			rec.Retain()
			parts[p] = rec
			continue
		}
		sel, err := s.take(rec, rows[lo:hi])
		if err != nil {
			for _, r := range parts {
				if r != nil {
					r.Release()
				}
			}
			return nil, fmt.Errorf("select the %d rows of partition %d: %w", hi-lo, p, err)
		}
		parts[p] = sel
	}
	return parts, nil
}

// Check says whether partitions holds one partition in [0, count) for
// each of rows rows, and if not, which row is out of range or how the
// lengths differ; a batch of more rows than an int32 counts is refused.
func Check(partitions []int32, rows, count int) error {
	if rows > math.MaxInt32 {
		return fmt.Errorf("a batch of %d rows: at most %d rows are scattered at once", rows, math.MaxInt32)
	}
	if len(partitions) != rows {
		return fmt.Errorf("a vector of %d partitions for a batch of %d rows: want one partition per row", len(partitions), rows)
	}
	for i, p := range partitions {
		if p < 0 || int(p) >= count {
			return fmt.Errorf("row %d has partition %d, out of [0, %d)", i, p, count)
		}
	}
	return nil
}

// Group orders the rows by partition (a stable counting sort): the rows
// of partition p are rows[starts[p]:starts[p+1]], ascending. partitions
// must be in [0, count) (Check). starts and rows reuse the storage of
// the slices given when it is large enough.
func Group(partitions []int32, count int, starts, rows []int32) ([]int32, []int32) {
	if cap(starts) < count+1 {
		starts = make([]int32, count+1)
	}
	starts = starts[:count+1]
	clear(starts)
	for _, p := range partitions {
		starts[p+1]++
	}
	for p := range count {
		starts[p+1] += starts[p]
	}
	if cap(rows) < len(partitions) {
		rows = make([]int32, len(partitions))
	}
	rows = rows[:len(partitions)]
	// Fill each partition's range from its end, walking the rows
	// backwards: starts[p] ends where it began, with no second array.
	for p := range count {
		starts[p] = starts[p+1]
	}
	for i := len(partitions) - 1; i >= 0; i-- {
		p := partitions[i]
		starts[p]--
		rows[starts[p]] = int32(i)
	}
	return starts, rows
}

// selector selects rows of batches of one schema. Once compute.Take
// refused a batch, each column is selected on its own, by Take or, for a
// column in gathered, row run by row run.
type selector struct {
	mem       memory.Allocator
	perColumn bool
	gathered  map[int]bool
}

// take returns the rows of rec at rows, ascending row numbers.
func (s *selector) take(rec arrow.RecordBatch, rows []int32) (arrow.RecordBatch, error) {
	b := array.NewInt32Builder(s.mem)
	defer b.Release()
	b.AppendValues(rows, nil)
	idx := b.NewInt32Array()
	defer idx.Release()
	ctx := compute.WithAllocator(context.Background(), s.mem)
	if !s.perColumn {
		out, err := compute.Take(ctx, *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(rec), compute.NewDatumWithoutOwning(idx))
		if err == nil {
			return out.(*compute.RecordDatum).Value, nil
		}
		// A column of a type Take has no kernel for: select column by
		// column, gathering the columns Take refuses.
		s.perColumn = true
		s.gathered = map[int]bool{}
	}
	cols := make([]arrow.Array, rec.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	var runs []rowRun
	for c, col := range rec.Columns() {
		if !s.gathered[c] {
			out, err := compute.TakeArray(ctx, col, idx)
			if err == nil {
				cols[c] = out
				continue
			}
			s.gathered[c] = true
		}
		if runs == nil {
			runs = runsOf(rows)
		}
		out, err := gather(col, runs, s.mem)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", rec.ColumnName(c), err)
		}
		cols[c] = out
	}
	return array.NewRecordBatch(rec.Schema(), cols, int64(len(rows))), nil
}
