package demo

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Part is the rows of one input batch that belong to one partition.
type Part struct {
	Partition int
	Record    arrow.RecordBatch
}

// builder appends rows to one partition's columns.
type builder struct {
	rb                                *array.RecordBuilder
	orderKey, partKey                 *array.Int64Builder
	suppKey, lineNumber               *array.Int32Builder
	quantity, price, discount, tax    *array.Float64Builder
	returnFlag, lineStatus            *array.StringBuilder
	shipDate, commitDate, receiptDate *array.Date32Builder
	shipInstruct, shipMode, comment   *array.StringBuilder
	rows                              int
}

func newBuilder(mem memory.Allocator) *builder {
	rb := array.NewRecordBuilder(mem, schema)
	f := func(name string) array.Builder { return rb.Field(schema.FieldIndices(name)[0]) }
	return &builder{
		rb:           rb,
		orderKey:     f(ColOrderKey).(*array.Int64Builder),
		partKey:      f(ColPartKey).(*array.Int64Builder),
		suppKey:      f(ColSuppKey).(*array.Int32Builder),
		lineNumber:   f(ColLineNumber).(*array.Int32Builder),
		quantity:     f(ColQuantity).(*array.Float64Builder),
		price:        f(ColExtendedPrice).(*array.Float64Builder),
		discount:     f(ColDiscount).(*array.Float64Builder),
		tax:          f(ColTax).(*array.Float64Builder),
		returnFlag:   f(ColReturnFlag).(*array.StringBuilder),
		lineStatus:   f(ColLineStatus).(*array.StringBuilder),
		shipDate:     f(ColShipDate).(*array.Date32Builder),
		commitDate:   f(ColCommitDate).(*array.Date32Builder),
		receiptDate:  f(ColReceiptDate).(*array.Date32Builder),
		shipInstruct: f(ColShipInstruct).(*array.StringBuilder),
		shipMode:     f(ColShipMode).(*array.StringBuilder),
		comment:      f(ColComment).(*array.StringBuilder),
	}
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
// the way a shuffle's map side splits each input batch by partition. One
// Batcher per goroutine; its builders are reused from batch to batch.
type Batcher struct {
	gen        Generator
	partitions int
	builders   []*builder
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
	return &Batcher{gen: gen, partitions: partitions, builders: make([]*builder, partitions), mem: mem}, nil
}

// Batch generates rows r and returns one record per non-empty partition,
// in partition order; the caller releases them. digests, if not nil, has
// one entry per partition and gets every generated row added.
func (b *Batcher) Batch(r Range, digests []Digest) []Part {
	// Reserve a little over the expected share of each partition, so
	// builders do not grow their buffers by doubling row after row.
	expect := int(r.Len()/int64(b.partitions))*5/4 + 8
	for p, bl := range b.builders {
		if bl == nil {
			bl = newBuilder(b.mem)
			b.builders[p] = bl
		}
		bl.reserve(expect)
	}
	var row Row
	for i := r.Lo; i < r.Hi; i++ {
		b.gen.Row(i, &row)
		p := PartitionOf(row.OrderKey, b.partitions)
		bl := b.builders[p]
		bl.append(&row)
		if digests != nil {
			digests[p].Add(&row)
		}
	}
	var out []Part
	for p, bl := range b.builders {
		if bl == nil || bl.rows == 0 {
			continue
		}
		out = append(out, Part{Partition: p, Record: bl.rb.NewRecordBatch()})
		bl.rows = 0
	}
	return out
}

// Release frees the builders.
func (b *Batcher) Release() {
	for i, bl := range b.builders {
		if bl != nil {
			bl.rb.Release()
			b.builders[i] = nil
		}
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
