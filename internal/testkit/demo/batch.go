package demo

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Part is the rows of one input batch that belong to one partition.
type Part struct {
	Partition int
	Record    arrow.RecordBatch
}

// lineitem holds one value per lineitem column, of the column's kind:
// a builder of each (builder) or an array of each (Columns).
type lineitem[I64, I32, F64, Str, Date any] struct {
	orderKey, partKey                 I64
	suppKey, lineNumber               I32
	quantity, price, discount, tax    F64
	returnFlag, lineStatus            Str
	shipDate, commitDate, receiptDate Date
	shipInstruct, shipMode, comment   Str
}

// builder appends rows to one partition's columns.
type builder struct {
	rb *array.RecordBuilder
	lineitem[*array.Int64Builder, *array.Int32Builder, *array.Float64Builder, *array.StringBuilder, *array.Date32Builder]
	rows int
}

func newBuilder(mem memory.Allocator) *builder {
	rb := array.NewRecordBuilder(mem, schema)
	f := func(name string) array.Builder { return rb.Field(schema.FieldIndices(name)[0]) }
	b := &builder{rb: rb}
	b.orderKey = f(ColOrderKey).(*array.Int64Builder)
	b.partKey = f(ColPartKey).(*array.Int64Builder)
	b.suppKey = f(ColSuppKey).(*array.Int32Builder)
	b.lineNumber = f(ColLineNumber).(*array.Int32Builder)
	b.quantity = f(ColQuantity).(*array.Float64Builder)
	b.price = f(ColExtendedPrice).(*array.Float64Builder)
	b.discount = f(ColDiscount).(*array.Float64Builder)
	b.tax = f(ColTax).(*array.Float64Builder)
	b.returnFlag = f(ColReturnFlag).(*array.StringBuilder)
	b.lineStatus = f(ColLineStatus).(*array.StringBuilder)
	b.shipDate = f(ColShipDate).(*array.Date32Builder)
	b.commitDate = f(ColCommitDate).(*array.Date32Builder)
	b.receiptDate = f(ColReceiptDate).(*array.Date32Builder)
	b.shipInstruct = f(ColShipInstruct).(*array.StringBuilder)
	b.shipMode = f(ColShipMode).(*array.StringBuilder)
	b.comment = f(ColComment).(*array.StringBuilder)
	return b
}

// reserve makes room for n more rows of typical lineitem sizes.
func (b *builder) reserve(n int) {
	b.rb.Reserve(n)
	b.returnFlag.ReserveData(n)
	b.lineStatus.ReserveData(n)
	b.shipInstruct.ReserveData(n * 12)
	b.shipMode.ReserveData(n * 5)
	b.comment.ReserveData(n * 72)
}

func (b *builder) append(r *Row) {
	b.orderKey.Append(r.OrderKey)
	b.partKey.Append(r.PartKey)
	b.suppKey.Append(r.SuppKey)
	b.lineNumber.Append(r.LineNumber)
	b.quantity.Append(r.Quantity)
	b.price.Append(r.ExtendedPrice)
	b.discount.Append(r.Discount)
	b.tax.Append(r.Tax)
	b.returnFlag.Append(r.ReturnFlag)
	b.lineStatus.Append(r.LineStatus)
	b.shipDate.Append(r.ShipDate)
	b.commitDate.Append(r.CommitDate)
	b.receiptDate.Append(r.ReceiptDate)
	b.shipInstruct.Append(r.ShipInstruct)
	b.shipMode.Append(r.ShipMode)
	b.comment.Append(r.Comment)
	b.rows++
}

// Batcher turns ranges of input rows into per-partition record batches,
// the way a shuffle's map side splits each input batch by partition: the
// rows are generated, ordered by partition (a counting sort, stable) and
// built into one batch, and each partition gets a slice of it. Its state
// is one builder, whatever the partition count. One Batcher per
// goroutine; its builder and row buffer are reused from batch to batch.
type Batcher struct {
	gen        Generator
	partitions int
	builder    *builder
	rows       []Row
	part       []int32
	order      []int32
	start      []int32
	mem        memory.Allocator
}

// NewBatcher returns a Batcher for gen's rows into partitions partitions.
// mem may be nil.
func NewBatcher(gen Generator, partitions int, mem memory.Allocator) (*Batcher, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("demo: partitions must be at least 1, got %d", partitions)
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &Batcher{gen: gen, partitions: partitions, mem: mem}, nil
}

// Batch generates rows r and returns one record per non-empty partition,
// in partition order: slices of one batch, which the caller releases.
// digests, if not nil, has one entry per partition and gets every
// generated row added.
func (b *Batcher) Batch(r Range, digests []Digest) []Part {
	n := int(r.Len())
	if b.builder == nil {
		b.builder = newBuilder(b.mem)
	}
	b.rows = slices.Grow(b.rows[:0], n)[:n]
	b.part = slices.Grow(b.part[:0], n)[:n]
	b.order = slices.Grow(b.order[:0], n)[:n]
	if b.start == nil {
		b.start = make([]int32, b.partitions+1)
	}
	clear(b.start)
	for i := range n {
		row := &b.rows[i]
		b.gen.Row(r.Lo+int64(i), row)
		p := PartitionOf(row.OrderKey, b.partitions)
		b.part[i] = int32(p)
		b.start[p+1]++
		if digests != nil {
			digests[p].Add(row)
		}
	}
	for p := range b.partitions {
		b.start[p+1] += b.start[p]
	}
	next := slices.Clone(b.start[:b.partitions])
	for i, p := range b.part {
		b.order[next[p]] = int32(i)
		next[p]++
	}
	b.builder.reserve(n)
	for _, i := range b.order {
		b.builder.append(&b.rows[i])
	}
	rec := b.builder.rb.NewRecordBatch()
	b.builder.rows = 0
	defer rec.Release()
	var out []Part
	for p := range b.partitions {
		if lo, hi := b.start[p], b.start[p+1]; hi > lo {
			out = append(out, Part{Partition: p, Record: rec.NewSlice(int64(lo), int64(hi))})
		}
	}
	return out
}

// Partitioned generates rows r as one batch, in generation order, and returns
// it with each row's partition: what a map task hands a Writer's
// WritePartitioned. The caller releases the batch; the partitions are
// the Batcher's, valid until its next call. digests, if not nil, has
// one entry per partition and gets every generated row added.
func (b *Batcher) Partitioned(r Range, digests []Digest) (arrow.RecordBatch, []int32) {
	n := int(r.Len())
	if b.builder == nil {
		b.builder = newBuilder(b.mem)
	}
	b.rows = slices.Grow(b.rows[:0], n)[:n]
	b.part = slices.Grow(b.part[:0], n)[:n]
	b.builder.reserve(n)
	for i := range n {
		row := &b.rows[i]
		b.gen.Row(r.Lo+int64(i), row)
		p := PartitionOf(row.OrderKey, b.partitions)
		b.part[i] = int32(p)
		if digests != nil {
			digests[p].Add(row)
		}
		b.builder.append(row)
	}
	rec := b.builder.rb.NewRecordBatch()
	b.builder.rows = 0
	return rec, b.part
}

// Release frees the builder.
func (b *Batcher) Release() {
	if b.builder != nil {
		b.builder.rb.Release()
		b.builder = nil
	}
}

// Chunks cuts r into consecutive ranges of at most n rows: the input
// batches of a worker.
func Chunks(r Range, n int64) []Range {
	if n < 1 {
		n = 1
	}
	var out []Range
	for lo := r.Lo; lo < r.Hi; lo += n {
		out = append(out, Range{lo, min(lo+n, r.Hi)})
	}
	return out
}
