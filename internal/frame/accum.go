package frame

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Accumulator copies the rows of many small record batches into one set
// of growable column buffers, so that a partition that receives a few
// rows at a time holds them as one dense batch: no Go objects per input
// batch (a retained 4-row batch of 16 columns costs kilobytes of arrays,
// data and buffer headers, several times its rows), and no slack of the
// caller's builders. Its memory is plain Go memory, counted exactly by
// Held. Not safe for concurrent use.
type Accumulator struct {
	schema *arrow.Schema
	cols   []*growCol
	rows   int64
	held   int64 // capacity of every column's buffers
	used   int64 // their length
	// view: columns over a piece's bytes, for AppendPiece; nil until
	// then.
	view *Accumulator
}

// growCol is one column's buffers as they grow. Which buffers a type uses
// follows the Arrow layout: valid (nil while the column has no null), and
// vals (fixed-width values, boolean bits, or string and binary bytes),
// offs (32- or 64-bit offsets of strings, binaries and lists), kids.
type growCol struct {
	dt    arrow.DataType
	id    arrow.Type
	width int // bytes per value of a fixed-width type; 4 or 8 for offsets
	n     int
	nulls int
	hasV  bool // valid holds the column's bitmap
	valid []byte
	vals  []byte
	offs  []byte
	kids  []*growCol
	fsl   int // values per row of a fixed-size list
}

// NewAccumulator returns an accumulator for schema, or false when a
// column's type is one it does not copy (dictionaries, views, unions,
// run-end encoded and extension types): batches of such a schema are
// retained as they are.
func NewAccumulator(schema *arrow.Schema) (*Accumulator, bool) {
	cols := make([]*growCol, schema.NumFields())
	for i, f := range schema.Fields() {
		c, ok := newGrowCol(f.Type)
		if !ok {
			return nil, false
		}
		cols[i] = c
	}
	return &Accumulator{schema: schema, cols: cols}, true
}

func newGrowCol(dt arrow.DataType) (*growCol, bool) {
	c := &growCol{dt: dt, id: dt.ID()}
	switch c.id {
	case arrow.NULL, arrow.BOOL:
	case arrow.STRING, arrow.BINARY:
		c.width = 4
	case arrow.LARGE_STRING, arrow.LARGE_BINARY:
		c.width = 8
	case arrow.LIST, arrow.MAP, arrow.LARGE_LIST:
		c.width = 4
		if c.id == arrow.LARGE_LIST {
			c.width = 8
		}
		k, ok := newGrowCol(dt.(arrow.ListLikeType).Elem())
		if !ok {
			return nil, false
		}
		if c.id == arrow.MAP {
			// A map's child is its entries struct, keys and values.
			k, ok = newGrowCol(dt.(*arrow.MapType).Elem())
			if !ok {
				return nil, false
			}
		}
		c.kids = []*growCol{k}
	case arrow.FIXED_SIZE_LIST:
		t := dt.(*arrow.FixedSizeListType)
		k, ok := newGrowCol(t.Elem())
		if !ok {
			return nil, false
		}
		c.fsl, c.kids = int(t.Len()), []*growCol{k}
	case arrow.STRUCT:
		for _, f := range dt.(*arrow.StructType).Fields() {
			k, ok := newGrowCol(f.Type)
			if !ok {
				return nil, false
			}
			c.kids = append(c.kids, k)
		}
	default:
		fw, ok := dt.(arrow.FixedWidthDataType)
		if !ok || c.id == arrow.DICTIONARY || c.id == arrow.EXTENSION || fw.BitWidth()%8 != 0 {
			return nil, false
		}
		c.width = fw.BitWidth() / 8
	}
	return c, true
}

// Rows is the number of rows accumulated.
func (a *Accumulator) Rows() int64 { return a.rows }

// Held is the bytes the accumulator's buffers occupy (their capacity).
func (a *Accumulator) Held() int64 { return a.held }

// Used is the bytes of the accumulator's buffers holding rows.
func (a *Accumulator) Used() int64 { return a.used }

func (c *growCol) capacity() int64 {
	n := int64(cap(c.valid) + cap(c.vals) + cap(c.offs))
	for _, k := range c.kids {
		n += k.capacity()
	}
	return n
}

// maxAccumulated bounds the bytes of one column's values before an
// append, so that with the append (a piece of at most a frame) they stay
// below what 32-bit offsets address: an accumulation is cut into frames
// long before.
const maxAccumulated = 1 << 30

// Append copies rec's rows (rec must have the accumulator's schema). It
// fails, changing nothing, when a column would pass maxAccumulated bytes;
// the caller then starts a new accumulation.
func (a *Accumulator) Append(rec arrow.RecordBatch) error {
	return a.AppendRange(rec, 0, rec.NumRows())
}

// AppendRange copies rows [lo, lo+n) of rec, as Append does.
func (a *Accumulator) AppendRange(rec arrow.RecordBatch, lo, n int64) error {
	if n == 0 {
		return nil
	}
	for i, c := range a.cols {
		if int64(len(c.vals)) > maxAccumulated {
			return fmt.Errorf("accumulate column %q: %d bytes held pass the %d-byte bound of one accumulation", a.schema.Field(i).Name, len(c.vals), maxAccumulated)
		}
	}
	for i, c := range a.cols {
		d := rec.Column(i).Data()
		grew, added := c.append(d, d.Offset()+int(lo), int(n))
		a.held += grew
		a.used += added
	}
	a.rows += n
	return nil
}

// append copies rows [off, off+n) of d's buffers (off includes d's
// offset) and returns how much the column's capacity and length grew.
func (c *growCol) append(d arrow.ArrayData, off, n int) (grew, added int64) {
	if n == 0 {
		return 0, 0
	}
	c0 := cap(c.valid) + cap(c.vals) + cap(c.offs)
	l0 := len(c.valid) + len(c.vals) + len(c.offs)
	p := piece{d: d, off: off, n: n}
	nulls := p.nulls()
	if c.id == arrow.NULL {
		nulls = n
	} else if nulls > 0 || c.hasV {
		c.growValid(n)
		if b := d.Buffers()[0]; b != nil && nulls > 0 {
			bitutil.CopyBitmap(b.Bytes(), off, n, c.valid, c.n)
		} else {
			bitutil.SetBitsTo(c.valid, int64(c.n), int64(n), true)
		}
	}
	switch c.id {
	case arrow.NULL:
	case arrow.BOOL:
		c.vals = growBits(c.vals, c.n, c.n+n)
		if b := d.Buffers()[1]; b != nil {
			bitutil.CopyBitmap(b.Bytes(), off, n, c.vals, c.n)
		}
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		if first, last := c.appendOffsets(d, off, n); last > first {
			c.vals = append(c.vals, d.Buffers()[2].Bytes()[first:last]...)
		}
	case arrow.LIST, arrow.MAP, arrow.LARGE_LIST:
		first, last := c.appendOffsets(d, off, n)
		k := d.Children()[0]
		g, a := c.kids[0].append(k, k.Offset()+first, last-first)
		grew, added = grew+g, added+a
	case arrow.FIXED_SIZE_LIST:
		k := d.Children()[0]
		g, a := c.kids[0].append(k, k.Offset()+off*c.fsl, n*c.fsl)
		grew, added = grew+g, added+a
	case arrow.STRUCT:
		for i, k := range d.Children() {
			g, a := c.kids[i].append(k, k.Offset()+off, n)
			grew, added = grew+g, added+a
		}
	default:
		if b := d.Buffers()[1]; b != nil {
			c.vals = append(c.vals, b.Bytes()[off*c.width:(off+n)*c.width]...)
		} else {
			c.vals = append(c.vals, make([]byte, n*c.width)...)
		}
	}
	c.n += n
	c.nulls += nulls
	return grew + int64(cap(c.valid)+cap(c.vals)+cap(c.offs)-c0), added + int64(len(c.valid)+len(c.vals)+len(c.offs)-l0)
}

// growValid makes room in the column's bitmap for n more rows, starting
// the bitmap (every row so far valid) when the column has none.
func (c *growCol) growValid(n int) {
	if !c.hasV {
		c.valid = growBits(c.valid[:0], 0, c.n+n)
		bitutil.SetBitsTo(c.valid, 0, int64(c.n), true)
		c.hasV = true
	} else {
		c.valid = growBits(c.valid, c.n, c.n+n)
	}
}

// appendOffsets appends the offsets of rows [off, off+n) of d rebased to
// run on from the column's last offset, and returns the range of values
// (bytes or child rows) they cover in d.
func (c *growCol) appendOffsets(d arrow.ArrayData, off, n int) (first, last int) {
	if c.width == 4 {
		src := arrow.Int32Traits.CastFromBytes(d.Buffers()[1].Bytes())[off : off+n+1]
		return appendOffs(c, src)
	}
	src := arrow.Int64Traits.CastFromBytes(d.Buffers()[1].Bytes())[off : off+n+1]
	return appendOffs(c, src)
}

func appendOffs[T int32 | int64](c *growCol, src []T) (first, last int) {
	w := c.width
	if len(c.offs) == 0 {
		c.offs = append(c.offs[:0], make([]byte, w)...) // the leading 0
	}
	end := getOff[T](c.offs[len(c.offs)-w:])
	delta := end - src[0]
	start := len(c.offs)
	c.offs = append(c.offs, make([]byte, (len(src)-1)*w)...)
	dst := arrow.GetData[T](c.offs[start:])
	for i, v := range src[1:] {
		dst[i] = v + delta
	}
	return int(src[0]), int(src[len(src)-1])
}

func getOff[T int32 | int64](b []byte) T { return arrow.GetData[T](b)[0] }

// growBits extends bitmap b, holding have bits, to hold want bits; the
// new bits are zero.
func growBits(b []byte, have, want int) []byte {
	need := int(bitutil.BytesForBits(int64(want)))
	if need <= len(b) {
		return b
	}
	return append(b, make([]byte, need-len(b))...)
}

// Finish returns the accumulated rows as one record batch (nil when there
// are none) and empties the accumulator. The batch owns the buffers: the
// accumulator starts new ones.
func (a *Accumulator) Finish() arrow.RecordBatch {
	rec := a.View()
	for _, c := range a.cols {
		c.reset(false)
	}
	a.rows, a.held, a.used = 0, 0, 0
	return rec
}

// View returns the accumulated rows as a record batch over the
// accumulator's own buffers (nil when there are none), valid until the
// next Append or Reset: for a caller that is done with it before then.
func (a *Accumulator) View() arrow.RecordBatch {
	if a.rows == 0 {
		return nil
	}
	cols := make([]arrow.Array, len(a.cols))
	for i, c := range a.cols {
		d := c.data()
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	rec := array.NewRecordBatch(a.schema, cols, a.rows)
	for _, c := range cols {
		c.Release()
	}
	return rec
}

// NewLike returns an empty accumulator of the same schema whose buffers
// start with the capacity of a's: the next segment of rows of the same
// shape fills it without growing, so no buffer is copied to grow.
func (a *Accumulator) NewLike() *Accumulator { return a.shaped(nil, true) }

// likeFrom is NewLike over spare's buffers: each of spare's buffers that
// is large enough serves, cut to the capacity NewLike would allocate
// (so that the accumulator grows, and counts Held, exactly as a new
// one); the others are allocated. spare must have a's schema and be
// empty, and is not to be used afterwards.
func (a *Accumulator) likeFrom(spare *Accumulator) *Accumulator { return a.shaped(spare, true) }

// emptyLike is an accumulator of a's schema with no buffers.
func (a *Accumulator) emptyLike() *Accumulator { return a.shaped(nil, false) }

// shaped is an empty accumulator of a's schema: with sized, buffers of
// a's capacities (spare's where they are large enough, see likeFrom);
// without, none.
func (a *Accumulator) shaped(spare *Accumulator, sized bool) *Accumulator {
	b := &Accumulator{schema: a.schema, cols: make([]*growCol, len(a.cols))}
	for i, c := range a.cols {
		var sc *growCol
		if spare != nil {
			sc = spare.cols[i]
		}
		b.cols[i] = c.shaped(sc, sized)
		b.held += b.cols[i].capacity()
	}
	return b
}

func (c *growCol) shaped(s *growCol, sized bool) *growCol {
	n := &growCol{dt: c.dt, id: c.id, width: c.width, fsl: c.fsl}
	if sized {
		var valid, vals, offs []byte
		if s != nil {
			valid, vals, offs = s.valid, s.vals, s.offs
		}
		n.valid = reuseBuf(valid, cap(c.valid))
		n.vals = reuseBuf(vals, cap(c.vals))
		n.offs = reuseBuf(offs, cap(c.offs))
	}
	for i, k := range c.kids {
		var sk *growCol
		if s != nil {
			sk = s.kids[i]
		}
		n.kids = append(n.kids, k.shaped(sk, sized))
	}
	return n
}

// reuseBuf is an empty buffer of capacity want: b's, cut to want, when it
// holds that much, else a new one (nil for want 0).
func reuseBuf(b []byte, want int) []byte {
	switch {
	case want == 0:
		return nil
	case cap(b) >= want:
		return b[:0:want]
	}
	return make([]byte, 0, want)
}

// Reset empties the accumulator and keeps its buffers for the next rows.
func (a *Accumulator) Reset() {
	for _, c := range a.cols {
		c.reset(true)
	}
	a.rows, a.used = 0, 0
}

func (c *growCol) reset(keep bool) {
	c.n, c.nulls, c.hasV = 0, 0, false
	if keep {
		c.valid, c.vals, c.offs = c.valid[:0], c.vals[:0], c.offs[:0]
	} else {
		c.valid, c.vals, c.offs = nil, nil, nil
	}
	for _, k := range c.kids {
		k.reset(keep)
	}
}

// data builds the column's ArrayData over its buffers.
func (c *growCol) data() arrow.ArrayData {
	buf := func(b []byte) *memory.Buffer {
		if b == nil {
			return nil
		}
		return memory.NewBufferBytes(b)
	}
	valid := c.valid
	if !c.hasV {
		valid = nil
	}
	var bufs []*memory.Buffer
	switch c.id {
	case arrow.NULL:
		bufs = []*memory.Buffer{nil}
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		bufs = []*memory.Buffer{buf(valid), buf(c.offs), memory.NewBufferBytes(c.vals)}
	case arrow.LIST, arrow.MAP, arrow.LARGE_LIST:
		bufs = []*memory.Buffer{buf(valid), buf(c.offs)}
	case arrow.FIXED_SIZE_LIST, arrow.STRUCT:
		bufs = []*memory.Buffer{buf(valid)}
	default:
		bufs = []*memory.Buffer{buf(valid), memory.NewBufferBytes(c.vals)}
	}
	kids := make([]arrow.ArrayData, len(c.kids))
	for i, k := range c.kids {
		kids[i] = k.data()
	}
	d := array.NewData(c.dt, c.n, bufs, kids, c.nulls, 0)
	for _, k := range kids {
		k.Release()
	}
	return d
}
