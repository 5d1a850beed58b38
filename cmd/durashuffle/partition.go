package main

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// splitter cuts records into one record per partition by a key column.
type splitter struct {
	column     int
	partitions int
	mem        memory.Allocator
	keys       []uint64 // the keys of the batch being split
	// perColumn is set once compute.Take refused a batch: from then on
	// each column is selected on its own, by Take or, for a column in
	// gathered, by gather.
	perColumn bool
	gathered  map[int]bool
}

func newSplitter(schema *arrow.Schema, column string, partitions int, mem memory.Allocator) (*splitter, error) {
	if partitions == 1 && column == "" {
		return &splitter{column: -1, partitions: 1, mem: mem}, nil
	}
	idx := schema.FieldIndices(column)
	switch len(idx) {
	case 0:
		names := make([]string, 0, schema.NumFields())
		for _, f := range schema.Fields() {
			names = append(names, f.Name)
		}
		return nil, usagef("--partition-by %q: no such column; the input has %q", column, names)
	case 1:
	default:
		return nil, usagef("--partition-by %q: the input has %d columns of that name", column, len(idx))
	}
	// A key type with no partitioning key is refused before any batch is
	// read.
	if err := checkKeyType(schema.Field(idx[0]).Type, mem); err != nil {
		return nil, usagef("--partition-by %s: %v", column, err)
	}
	return &splitter{column: idx[0], partitions: partitions, mem: mem}, nil
}

// checkKeyType is columnKeys' verdict on a column of type dt, from an
// empty one. A type Arrow cannot make an empty array of is left to the
// batches' own check.
func checkKeyType(dt arrow.DataType, mem memory.Allocator) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	empty := array.MakeArrayOfNull(mem, dt, 0)
	defer empty.Release()
	return columnKeys(empty, nil)
}

// split returns the rows of rec for each non-empty partition, in
// partition order; the caller releases the records.
func (s *splitter) split(ctx context.Context, rec arrow.RecordBatch) ([]int, []arrow.RecordBatch, error) {
	if s.column < 0 || rec.NumRows() == 0 {
		rec.Retain()
		return []int{0}, []arrow.RecordBatch{rec}, nil
	}
	n := int(rec.NumRows())
	if cap(s.keys) < n {
		s.keys = make([]uint64, n)
	}
	keys := s.keys[:n]
	if err := columnKeys(rec.Column(s.column), keys); err != nil {
		return nil, nil, usagef("--partition-by %s: %v", rec.ColumnName(s.column), err)
	}
	part := make([]int32, n)
	counts := make([]int32, s.partitions)
	for i, k := range keys {
		p := int32(partitionOf(k, s.partitions))
		part[i] = p
		counts[p]++
	}
	var (
		ps   []int
		recs []arrow.RecordBatch
	)
	for p, c := range counts {
		if c == int32(n) { // all in one partition: no copy
			rec.Retain()
			return []int{p}, []arrow.RecordBatch{rec}, nil
		}
		if c > 0 {
			ps = append(ps, p)
		}
	}
	// Row numbers of each partition, in input order.
	offsets := make([]int32, s.partitions+1)
	for p, c := range counts {
		offsets[p+1] = offsets[p] + c
	}
	rows := make([]int32, n)
	fill := append([]int32(nil), offsets[:s.partitions]...)
	for i, p := range part {
		rows[fill[p]] = int32(i)
		fill[p]++
	}
	for _, p := range ps {
		sel, err := s.take(ctx, rec, rows[offsets[p]:offsets[p+1]])
		if err != nil {
			for _, r := range recs {
				r.Release()
			}
			return nil, nil, fmt.Errorf("select the %d rows of partition %d: %w", counts[p], p, err)
		}
		recs = append(recs, sel)
	}
	return ps, recs, nil
}

// take returns the rows of rec at rows, ascending row numbers.
func (s *splitter) take(ctx context.Context, rec arrow.RecordBatch, rows []int32) (arrow.RecordBatch, error) {
	b := array.NewInt32Builder(s.mem)
	defer b.Release()
	b.AppendValues(rows, nil)
	idx := b.NewInt32Array()
	defer idx.Release()
	ctx = compute.WithAllocator(ctx, s.mem)
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
