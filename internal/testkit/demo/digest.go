package demo

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Hash is a 64-bit hash of every value of the row. A changed, swapped or
// truncated value changes it (with overwhelming probability).
func (r *Row) Hash() uint64 {
	h := uint64(0x243F6A8885A308D3)
	h = hashU64(h, uint64(r.OrderKey))
	h = hashU64(h, uint64(r.PartKey))
	h = hashU64(h, uint64(uint32(r.SuppKey))|uint64(uint32(r.LineNumber))<<32)
	h = hashU64(h, math.Float64bits(r.Quantity))
	h = hashU64(h, math.Float64bits(r.ExtendedPrice))
	h = hashU64(h, math.Float64bits(r.Discount))
	h = hashU64(h, math.Float64bits(r.Tax))
	h = hashString(h, r.ReturnFlag)
	h = hashString(h, r.LineStatus)
	h = hashU64(h, uint64(uint32(r.ShipDate))|uint64(uint32(r.CommitDate))<<32)
	h = hashU64(h, uint64(uint32(r.ReceiptDate)))
	h = hashString(h, r.ShipInstruct)
	h = hashString(h, r.ShipMode)
	h = hashString(h, r.Comment)
	return mix64(h)
}

func hashU64(h, v uint64) uint64 {
	return (h^v)*0x9E3779B97F4A7C15 + 0x7F4A7C15
}

// hashString folds s 8 bytes at a time, then its length, so "ab"+"c" and
// "a"+"bc" in neighbouring columns differ.
func hashString(h uint64, s string) uint64 {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		h = hashU64(h, binary.LittleEndian.Uint64([]byte(s[i:i+8])))
	}
	var tail [8]byte
	copy(tail[:], s[i:])
	h = hashU64(h, binary.LittleEndian.Uint64(tail[:]))
	return mix64(hashU64(h, uint64(len(s))))
}

// Digest is an order-independent summary of a multiset of rows: the row
// count and the sum (mod 2^64) of row hashes. Unlike a XOR, a sum does not
// cancel a row that appears twice.
type Digest struct {
	Rows int64  `json:"rows"`
	Sum  uint64 `json:"sum"`
}

// Add counts one row.
func (d *Digest) Add(r *Row) {
	d.Rows++
	d.Sum += r.Hash()
}

// Merge adds o's rows to d.
func (d *Digest) Merge(o Digest) {
	d.Rows += o.Rows
	d.Sum += o.Sum
}

// Expected computes the digest of every partition of rows [0, rows)
// straight from the generator, without Arrow.
func (g Generator) Expected(rows int64, partitions int) []Digest {
	out := make([]Digest, partitions)
	var r Row
	for i := range rows {
		g.Row(i, &r)
		out[PartitionOf(r.OrderKey, partitions)].Add(&r)
	}
	return out
}

// Columns are a record's lineitem columns, found by name and type, so a
// reader can decode rows without trusting column order.
type Columns struct {
	lineitem[*array.Int64, *array.Int32, *array.Float64, *array.String, *array.Date32]
	rows int
}

// NewColumns resolves rec's columns. It fails if a column is missing, has
// another type, or holds nulls (the generator writes none).
func NewColumns(rec arrow.RecordBatch) (*Columns, error) {
	c := &Columns{rows: int(rec.NumRows())}
	sc := rec.Schema()
	get := func(name string, dst any) error {
		idx := sc.FieldIndices(name)
		if len(idx) != 1 {
			return fmt.Errorf("record has %d columns named %s, want 1", len(idx), name)
		}
		col := rec.Column(idx[0])
		if col.NullN() > 0 {
			return fmt.Errorf("column %s has %d nulls", name, col.NullN())
		}
		ok := false
		switch p := dst.(type) {
		case **array.Int64:
			*p, ok = col.(*array.Int64)
		case **array.Int32:
			*p, ok = col.(*array.Int32)
		case **array.Float64:
			*p, ok = col.(*array.Float64)
		case **array.String:
			*p, ok = col.(*array.String)
		case **array.Date32:
			*p, ok = col.(*array.Date32)
		}
		if !ok {
			return fmt.Errorf("column %s has type %s", name, col.DataType())
		}
		return nil
	}
	for _, f := range []struct {
		name string
		dst  any
	}{
		{ColOrderKey, &c.orderKey}, {ColPartKey, &c.partKey},
		{ColSuppKey, &c.suppKey}, {ColLineNumber, &c.lineNumber},
		{ColQuantity, &c.quantity}, {ColExtendedPrice, &c.price},
		{ColDiscount, &c.discount}, {ColTax, &c.tax},
		{ColReturnFlag, &c.returnFlag}, {ColLineStatus, &c.lineStatus},
		{ColShipDate, &c.shipDate}, {ColCommitDate, &c.commitDate}, {ColReceiptDate, &c.receiptDate},
		{ColShipInstruct, &c.shipInstruct}, {ColShipMode, &c.shipMode}, {ColComment, &c.comment},
	} {
		if err := get(f.name, f.dst); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Len is the number of rows.
func (c *Columns) Len() int { return c.rows }

// Row decodes row j into r. r's strings alias the record's buffers: use
// them before the record is released.
func (c *Columns) Row(j int, r *Row) {
	r.OrderKey = c.orderKey.Value(j)
	r.PartKey = c.partKey.Value(j)
	r.SuppKey = c.suppKey.Value(j)
	r.LineNumber = c.lineNumber.Value(j)
	r.Quantity = c.quantity.Value(j)
	r.ExtendedPrice = c.price.Value(j)
	r.Discount = c.discount.Value(j)
	r.Tax = c.tax.Value(j)
	r.ReturnFlag = c.returnFlag.Value(j)
	r.LineStatus = c.lineStatus.Value(j)
	r.ShipDate = c.shipDate.Value(j)
	r.CommitDate = c.commitDate.Value(j)
	r.ReceiptDate = c.receiptDate.Value(j)
	r.ShipInstruct = c.shipInstruct.Value(j)
	r.ShipMode = c.shipMode.Value(j)
	r.Comment = c.comment.Value(j)
}

// Check adds the rows of rec, read back from partition, to d. It fails if
// rec is not a lineitem record or holds a row that belongs to another
// partition.
func Check(rec arrow.RecordBatch, partition, partitions int, d *Digest) error {
	c, err := NewColumns(rec)
	if err != nil {
		return fmt.Errorf("partition %d: %w", partition, err)
	}
	var r Row
	for j := range c.Len() {
		c.Row(j, &r)
		if p := PartitionOf(r.OrderKey, partitions); p != partition {
			return fmt.Errorf("partition %d: row with order key %d belongs to partition %d", partition, r.OrderKey, p)
		}
		d.Add(&r)
	}
	return nil
}
