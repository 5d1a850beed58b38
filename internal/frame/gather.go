package frame

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
)

// AppendRows copies the rows of rec at rows, in the order given (rows
// are row numbers of rec, each in [0, rec.NumRows())), as Append copies
// a range: so a writer that scatters a batch across partitions copies
// each partition's rows straight into its buffers, with no slice of the
// batch per partition. It fails, changing nothing, as Append does.
func (a *Accumulator) AppendRows(rec arrow.RecordBatch, rows []int32) error {
	if len(rows) == 0 {
		return nil
	}
	for i, c := range a.cols {
		if int64(len(c.vals)) > maxAccumulated {
			return fmt.Errorf("accumulate column %q: %d bytes held pass the %d-byte bound of one accumulation", a.schema.Field(i).Name, len(c.vals), maxAccumulated)
		}
	}
	for i, c := range a.cols {
		grew, added := c.gather(rec.Column(i).Data(), rows)
		a.held += grew
		a.used += added
	}
	a.rows += int64(len(rows))
	return nil
}

// gather copies the rows of d at rows (relative to d's offset) and
// returns how much the column's capacity and length grew. Flat columns
// are gathered value by value; nested ones run by run of consecutive
// rows, through append.
func (c *growCol) gather(d arrow.ArrayData, rows []int32) (grew, added int64) {
	base := d.Offset()
	switch c.id {
	case arrow.LIST, arrow.MAP, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST, arrow.STRUCT:
		for i := 0; i < len(rows); {
			j := i + 1
			for j < len(rows) && rows[j] == rows[j-1]+1 {
				j++
			}
			g, a := c.append(d, base+int(rows[i]), j-i)
			grew, added = grew+g, added+a
			i = j
		}
		return grew, added
	}
	n := len(rows)
	c0 := cap(c.valid) + cap(c.vals) + cap(c.offs)
	l0 := len(c.valid) + len(c.vals) + len(c.offs)
	var srcValid []byte
	if b := d.Buffers()[0]; b != nil && d.NullN() != 0 { // negative: not counted yet
		srcValid = b.Bytes()
	}
	nulls := 0
	switch {
	case c.id == arrow.NULL:
		nulls = n
	case srcValid != nil:
		for _, r := range rows {
			if !bitutil.BitIsSet(srcValid, base+int(r)) {
				nulls++
			}
		}
	}
	if c.id != arrow.NULL && (nulls > 0 || c.hasV) {
		c.growValid(n)
		if nulls > 0 {
			for k, r := range rows {
				bitutil.SetBitTo(c.valid, c.n+k, bitutil.BitIsSet(srcValid, base+int(r)))
			}
		} else {
			bitutil.SetBitsTo(c.valid, int64(c.n), int64(n), true)
		}
	}
	switch c.id {
	case arrow.NULL:
	case arrow.BOOL:
		c.vals = growBits(c.vals, c.n, c.n+n)
		if b := d.Buffers()[1]; b != nil {
			src := b.Bytes()
			for k, r := range rows {
				bitutil.SetBitTo(c.vals, c.n+k, bitutil.BitIsSet(src, base+int(r)))
			}
		} else {
			bitutil.SetBitsTo(c.vals, int64(c.n), int64(n), false)
		}
	case arrow.STRING, arrow.BINARY:
		gatherBytes(c, arrow.Int32Traits.CastFromBytes(d.Buffers()[1].Bytes())[base:], d.Buffers()[2], rows)
	case arrow.LARGE_STRING, arrow.LARGE_BINARY:
		gatherBytes(c, arrow.Int64Traits.CastFromBytes(d.Buffers()[1].Bytes())[base:], d.Buffers()[2], rows)
	default:
		gatherFixed(c, d, base, rows)
	}
	c.n += n
	c.nulls += nulls
	return int64(cap(c.valid) + cap(c.vals) + cap(c.offs) - c0), int64(len(c.valid) + len(c.vals) + len(c.offs) - l0)
}

// gatherFixed copies the fixed-width values of d at rows.
func gatherFixed(c *growCol, d arrow.ArrayData, base int, rows []int32) {
	w, n := c.width, len(rows)
	start := len(c.vals)
	c.vals = append(c.vals, make([]byte, n*w)...)
	b := d.Buffers()[1]
	if b == nil {
		return // no values buffer: zeros
	}
	src, dst := b.Bytes(), c.vals[start:]
	switch w {
	case 1:
		for k, r := range rows {
			dst[k] = src[base+int(r)]
		}
	case 4:
		s, t := arrow.Uint32Traits.CastFromBytes(src), arrow.Uint32Traits.CastFromBytes(dst)
		for k, r := range rows {
			t[k] = s[base+int(r)]
		}
	case 8:
		s, t := arrow.Uint64Traits.CastFromBytes(src), arrow.Uint64Traits.CastFromBytes(dst)
		for k, r := range rows {
			t[k] = s[base+int(r)]
		}
	default:
		for k, r := range rows {
			i := (base + int(r)) * w
			copy(dst[k*w:(k+1)*w], src[i:i+w])
		}
	}
}

// gatherBytes appends the offsets and bytes of the strings or binaries
// at rows; offs are the column's offsets from its first row.
func gatherBytes[T int32 | int64](c *growCol, offs []T, data interface{ Bytes() []byte }, rows []int32) {
	w := c.width
	if len(c.offs) == 0 {
		c.offs = append(c.offs[:0], make([]byte, w)...) // the leading 0
	}
	end := getOff[T](c.offs[len(c.offs)-w:])
	first := end
	start := len(c.offs)
	c.offs = append(c.offs, make([]byte, len(rows)*w)...)
	dst := arrow.GetData[T](c.offs[start:])
	for k, r := range rows {
		end += offs[r+1] - offs[r]
		dst[k] = end
	}
	if end == first {
		return
	}
	src := data.Bytes()
	if need := len(c.vals) + int(end-first); need > cap(c.vals) {
		c.vals = growBytes(c.vals, need)
	}
	for _, r := range rows {
		c.vals = append(c.vals, src[offs[r]:offs[r+1]]...)
	}
}

// growBytes is b with room for need bytes, grown as append grows a
// slice, so that the column's capacity grows as Append's would.
func growBytes(b []byte, need int) []byte {
	return append(b, make([]byte, need-len(b))...)[:len(b)]
}
