package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/tools/demo"
)

// keyFunc returns the 64-bit partitioning key of row i. Integer values are
// their own key (so partitioning a lineitem table by l_orderkey matches
// the demo's), other values are hashed; every null has key 0.
type keyFunc func(i int) int64

// keyOf returns the key function of a column, or an error naming the
// column's type when it cannot be partitioned by.
func keyOf(col arrow.Array) (keyFunc, error) {
	null := func(f keyFunc) keyFunc {
		if col.NullN() == 0 {
			return f
		}
		return func(i int) int64 {
			if col.IsNull(i) {
				return 0
			}
			return f(i)
		}
	}
	switch a := col.(type) {
	case *array.Int8:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Int16:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Int32:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Int64:
		return null(func(i int) int64 { return a.Value(i) }), nil
	case *array.Uint8:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Uint16:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Uint32:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Uint64:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Date32:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Date64:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Timestamp:
		return null(func(i int) int64 { return int64(a.Value(i)) }), nil
	case *array.Boolean:
		return null(func(i int) int64 {
			if a.Value(i) {
				return 1
			}
			return 2
		}), nil
	case *array.Float32:
		return null(func(i int) int64 { return int64(math.Float64bits(float64(a.Value(i)))) }), nil
	case *array.Float64:
		return null(func(i int) int64 { return int64(math.Float64bits(a.Value(i))) }), nil
	case *array.String:
		return null(func(i int) int64 { return hashBytes([]byte(a.Value(i))) }), nil
	case *array.LargeString:
		return null(func(i int) int64 { return hashBytes([]byte(a.Value(i))) }), nil
	case *array.StringView:
		return null(func(i int) int64 { return hashBytes([]byte(a.Value(i))) }), nil
	case *array.Binary:
		return null(func(i int) int64 { return hashBytes(a.Value(i)) }), nil
	case *array.LargeBinary:
		return null(func(i int) int64 { return hashBytes(a.Value(i)) }), nil
	case *array.Dictionary:
		// By value, not by index: dictionaries differ from batch to batch.
		values, err := keyOf(a.Dictionary())
		if err != nil {
			return nil, err
		}
		return null(func(i int) int64 { return values(a.GetValueIndex(i)) }), nil
	}
	return nil, fmt.Errorf("cannot partition by a column of type %s: want an integer, date, timestamp, boolean, float, string, binary or dictionary column", col.DataType())
}

func hashBytes(b []byte) int64 {
	h := fnv.New64a()
	h.Write(b)
	return int64(h.Sum64())
}

// splitter cuts records into one record per partition by a key column.
type splitter struct {
	column     int
	partitions int
	mem        memory.Allocator
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
	return &splitter{column: idx[0], partitions: partitions, mem: mem}, nil
}

// split returns the rows of rec for each non-empty partition, in
// partition order; the caller releases the records.
func (s *splitter) split(ctx context.Context, rec arrow.RecordBatch) ([]int, []arrow.RecordBatch, error) {
	if s.column < 0 || rec.NumRows() == 0 {
		rec.Retain()
		return []int{0}, []arrow.RecordBatch{rec}, nil
	}
	key, err := keyOf(rec.Column(s.column))
	if err != nil {
		return nil, nil, usagef("--partition-by %s: %v", rec.ColumnName(s.column), err)
	}
	n := int(rec.NumRows())
	part := make([]int32, n)
	counts := make([]int32, s.partitions)
	for i := range n {
		p := int32(demo.PartitionOf(key(i), s.partitions))
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

func (s *splitter) take(ctx context.Context, rec arrow.RecordBatch, rows []int32) (arrow.RecordBatch, error) {
	b := array.NewInt32Builder(s.mem)
	defer b.Release()
	b.AppendValues(rows, nil)
	idx := b.NewInt32Array()
	defer idx.Release()
	out, err := compute.Take(compute.WithAllocator(ctx, s.mem), *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(rec), compute.NewDatumWithoutOwning(idx))
	if err != nil {
		return nil, err
	}
	return out.(*compute.RecordDatum).Value, nil
}
