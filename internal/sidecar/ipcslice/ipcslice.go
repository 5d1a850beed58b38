// Package ipcslice prepares record batches for arrow-go's IPC writer,
// which cannot encode two valid layouts: a list view or large list view
// array at a non-zero offset (its rebased offsets start from the lowest
// int, not the lowest offset: "arrow/array: index out of range"), and a
// dense union at a non-zero offset (its child offsets are rebased over
// the whole type code buffer, not the slice: "index out of range").
// Both arise from slicing a batch (arrow.RecordBatch.NewSlice), which a
// shuffle does all the time. A slice at offset 0 is encoded, but with
// all of its children or values, however few rows it has: a batch cut
// in pieces to fit a message would send the whole batch's values in its
// first piece. Compact rebuilds the columns that hold either type at
// offset 0 and with only the values their rows use.
package ipcslice

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Compact returns rec, retained, when no column holds a list view or a
// dense union at a non-zero offset, or with values past those its rows
// use, at any depth; otherwise a new batch
// whose such columns are copies at offset 0, the other columns shared.
// A dense union is rebuilt over the range of each child its rows use
// (array.Concatenate does not take unions); any other column by
// array.Concatenate, which fails, naming the column, for a dense union
// nested in another type. The caller releases the result.
func Compact(rec arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	var cols []arrow.Array
	for i, c := range rec.Columns() {
		if !slicedRisky(c.Data(), false) {
			continue
		}
		if cols == nil {
			cols = append([]arrow.Array(nil), rec.Columns()...)
		}
		cp, err := compact(c, mem)
		if err != nil {
			for j, r := range cols[:i] {
				if r != rec.Column(j) {
					r.Release()
				}
			}
			return nil, fmt.Errorf("copy column %d %q (%s) to offset 0 for the IPC writer: %w", i, rec.Schema().Field(i).Name, c.DataType(), err)
		}
		cols[i] = cp
	}
	if cols == nil {
		rec.Retain()
		return rec, nil
	}
	out := array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	for i, c := range cols {
		if c != rec.Column(i) {
			c.Release()
		}
	}
	return out, nil
}

// slicedRisky says whether d, or a child of d, is a list view or dense
// union that the IPC writer would meet at a non-zero offset: its own
// offset is not zero, or an ancestor's is (the writer slices children
// by their parent's offset or value range).
func slicedRisky(d arrow.ArrayData, under bool) bool {
	sliced := under || d.Offset() != 0
	switch d.DataType().ID() {
	case arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW, arrow.DENSE_UNION:
		if sliced || oversized(d) {
			return true
		}
	case arrow.LIST, arrow.LARGE_LIST, arrow.MAP:
		// The writer slices a list's values to the list's value range:
		// a range that does not start at 0 is an offset in the child.
		if !sliced && d.Len() > 0 && len(d.Buffers()) > 1 && d.Buffers()[1] != nil {
			sliced = firstOffset(d) != 0
		}
	}
	if d.DataType().ID() == arrow.DICTIONARY && slicedRisky(d.Dictionary(), false) {
		return true
	}
	for _, c := range d.Children() {
		if slicedRisky(c, sliced) {
			return true
		}
	}
	return false
}

// firstOffset is the first value offset of a list, large list or map.
func firstOffset(d arrow.ArrayData) int64 {
	b := d.Buffers()[1].Bytes()
	if d.DataType().ID() == arrow.LARGE_LIST {
		v := arrow.Int64Traits.CastFromBytes(b)
		if d.Offset() < len(v) {
			return v[d.Offset()]
		}
		return 0
	}
	v := arrow.Int32Traits.CastFromBytes(b)
	if d.Offset() < len(v) {
		return int64(v[d.Offset()])
	}
	return 0
}

// compact copies a to offset 0: a dense union by its type codes, its
// value offsets rebased, and for each child the range its rows use;
// anything else by array.Concatenate.
func compact(a arrow.Array, mem memory.Allocator) (arrow.Array, error) {
	u, ok := a.(*array.DenseUnion)
	if !ok {
		return array.Concatenate([]arrow.Array{a}, mem)
	}
	dt := u.UnionType()
	n := u.Len()
	codes := u.RawTypeCodes()[:n]
	offs := u.RawValueOffsets()[:n]
	lo := make([]int32, len(dt.Fields()))
	hi := make([]int32, len(dt.Fields()))
	for k := range lo {
		lo[k], hi[k] = -1, -1
	}
	for i := range codes {
		k := u.ChildID(i)
		if lo[k] < 0 || offs[i] < lo[k] {
			lo[k] = offs[i]
		}
		hi[k] = max(hi[k], offs[i])
	}
	codeBuf := memory.NewResizableBuffer(mem)
	codeBuf.Resize(n)
	copy(codeBuf.Bytes(), arrow.Int8Traits.CastToBytes(codes))
	offBuf := memory.NewResizableBuffer(mem)
	offBuf.Resize(arrow.Int32Traits.BytesRequired(n))
	newOffs := arrow.Int32Traits.CastFromBytes(offBuf.Bytes())
	for i := range codes {
		newOffs[i] = offs[i] - lo[u.ChildID(i)]
	}
	defer codeBuf.Release()
	defer offBuf.Release()
	children := make([]arrow.ArrayData, len(lo))
	for k := range lo {
		child := u.Field(k)
		from, to := int64(0), int64(0)
		if lo[k] >= 0 {
			from, to = int64(lo[k]), int64(hi[k])+1
		}
		s := array.NewSlice(child, from, to)
		if slicedRisky(s.Data(), false) {
			cp, err := compact(s, mem)
			s.Release()
			if err != nil {
				for _, d := range children[:k] {
					d.Release()
				}
				return nil, fmt.Errorf("child %d of %s: %w", k, dt, err)
			}
			s = cp
		}
		children[k] = s.Data()
		children[k].Retain()
		s.Release()
	}
	d := array.NewData(dt, n, []*memory.Buffer{nil, codeBuf, offBuf}, children, 0, 0)
	for _, c := range children {
		c.Release()
	}
	defer d.Release()
	return array.MakeFromData(d), nil
}

// oversized says whether a list view or dense union at offset 0 holds
// values past those of its rows (a head slice of a longer array): a list
// view whose values run past its furthest end, a dense union whose
// children hold more values than it has rows.
func oversized(d arrow.ArrayData) bool {
	switch d.DataType().ID() {
	case arrow.DENSE_UNION:
		n := 0
		for _, c := range d.Children() {
			n += c.Len()
		}
		return n > d.Len()
	case arrow.LIST_VIEW:
		a := array.NewListViewData(d)
		defer a.Release()
		return viewEnd(a) < int64(a.ListValues().Len())
	case arrow.LARGE_LIST_VIEW:
		a := array.NewLargeListViewData(d)
		defer a.Release()
		return viewEnd(a) < int64(a.ListValues().Len())
	}
	return false
}

// viewEnd is the furthest end of a list view's non-null, non-empty rows.
func viewEnd(a array.VarLenListLike) int64 {
	var end int64
	for i := range a.Len() {
		if a.IsNull(i) {
			continue
		}
		if s, e := a.ValueOffsets(i); e > s {
			end = max(end, e)
		}
	}
	return end
}
