package arrowipc

import (
	"github.com/durashuffle/durashuffle/internal/arrowcheck"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// NeedsIPCRewrite says whether a column of type dt may need ForIPC: it
// holds a list view or a union.
func NeedsIPCRewrite(dt arrow.DataType) bool {
	return arrowcheck.Has(dt, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW, arrow.DENSE_UNION, arrow.SPARSE_UNION)
}

// ForIPC returns rec, retained, or a batch of the same values in which
// every list view and union, at any depth, has offset 0 (and every
// struct, list, map and fixed-size list above one has its offset pushed
// into its children): arrow-go's IPC writer fails on list views with an
// offset ("index out of range") and writes sliced dense unions wrongly.
// Offsets, sizes and type ids are sliced, not copied; only validity
// bitmaps at an offset and rebased list offsets are new memory, from
// mem. The caller releases the result.
func ForIPC(rec arrow.RecordBatch, mem memory.Allocator) arrow.RecordBatch {
	out, changed := arrowcheck.RewriteColumns(rec, NeedsIPCRewrite, func(d arrow.ArrayData) (arrow.ArrayData, bool) {
		return zeroOffset(d, mem)
	})
	if !changed {
		rec.Retain()
	}
	return out
}

// zeroOffset returns d, or (changed) a new ArrayData of d's values in
// which no list view or union below has an offset.
func zeroOffset(d arrow.ArrayData, mem memory.Allocator) (arrow.ArrayData, bool) {
	dt := d.DataType()
	if !NeedsIPCRewrite(dt) {
		return d, false
	}
	off, n := d.Offset(), d.Len()
	bufs := d.Buffers()
	kids := d.Children()
	var fresh []*memory.Buffer // buffers made here, released after NewData
	var newKids []arrow.ArrayData
	changed := false
	defer func() {
		for _, b := range fresh {
			b.Release()
		}
		for _, k := range newKids {
			k.Release()
		}
	}()
	// child returns c's values [lo, hi) with no offset below.
	child := func(c arrow.ArrayData, lo, hi int) arrow.ArrayData {
		if lo != 0 || hi != c.Len() {
			s := array.NewSliceData(c, int64(lo), int64(hi))
			nc, ch := zeroOffset(s, mem)
			if ch {
				s.Release()
				s = nc
			}
			newKids = append(newKids, s)
			return s
		}
		nc, ch := zeroOffset(c, mem)
		if ch {
			newKids = append(newKids, nc)
		}
		return nc
	}
	validity := func() *memory.Buffer {
		if len(bufs) == 0 || bufs[0] == nil || off == 0 {
			if len(bufs) == 0 {
				return nil
			}
			return bufs[0]
		}
		b := memory.NewResizableBuffer(mem)
		b.Resize(int(bitutil.BytesForBits(int64(n))))
		bitutil.CopyBitmap(bufs[0].Bytes(), off, n, b.Bytes(), 0)
		fresh = append(fresh, b)
		return b
	}
	slice := func(b *memory.Buffer, width int) *memory.Buffer {
		if b == nil {
			return nil
		}
		s := memory.SliceBuffer(b, off*width, n*width)
		fresh = append(fresh, s)
		return s
	}
	outBufs := bufs
	outKids := kids
	switch arrowcheck.StorageID(dt) {
	case arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW:
		w := arrow.Int32SizeBytes
		if arrowcheck.StorageID(dt) == arrow.LARGE_LIST_VIEW {
			w = arrow.Int64SizeBytes
		}
		if off != 0 {
			outBufs, changed = []*memory.Buffer{validity(), slice(bufs[1], w), slice(bufs[2], w)}, true
		}
		k := child(kids[0], 0, kids[0].Len())
		if k != kids[0] {
			outKids, changed = []arrow.ArrayData{k}, true
		}
	case arrow.DENSE_UNION:
		if off != 0 {
			outBufs, changed = []*memory.Buffer{nil, slice(bufs[1], 1), slice(bufs[2], arrow.Int32SizeBytes)}, true
		}
		outKids = nil
		for _, c := range kids {
			k := child(c, 0, c.Len())
			changed = changed || k != c
			outKids = append(outKids, k)
		}
	case arrow.SPARSE_UNION:
		if off != 0 {
			outBufs, changed = []*memory.Buffer{nil, slice(bufs[1], 1)}, true
		}
		outKids = nil
		for _, c := range kids {
			k := child(c, off, off+n)
			changed = changed || k != c
			outKids = append(outKids, k)
		}
	case arrow.STRUCT:
		if off != 0 {
			outBufs, changed = []*memory.Buffer{validity()}, true
		}
		outKids = nil
		for _, c := range kids {
			k := child(c, off, off+n)
			changed = changed || k != c
			outKids = append(outKids, k)
		}
	case arrow.FIXED_SIZE_LIST:
		size := int(dt.(*arrow.FixedSizeListType).Len())
		if ext, ok := dt.(arrow.ExtensionType); ok {
			size = int(ext.StorageType().(*arrow.FixedSizeListType).Len())
		}
		if off != 0 {
			outBufs, changed = []*memory.Buffer{validity()}, true
		}
		k := child(kids[0], off*size, (off+n)*size)
		if k != kids[0] {
			outKids, changed = []arrow.ArrayData{k}, true
		}
	case arrow.LIST, arrow.MAP, arrow.LARGE_LIST:
		if n == 0 {
			outBufs, outKids, changed = []*memory.Buffer{nil, nil}, []arrow.ArrayData{child(kids[0], 0, 0)}, true
			break
		}
		large := arrowcheck.StorageID(dt) == arrow.LARGE_LIST
		var lo, hi int
		if large {
			o := arrow.Int64Traits.CastFromBytes(bufs[1].Bytes())
			lo, hi = int(o[off]), int(o[off+n])
		} else {
			o := arrow.Int32Traits.CastFromBytes(bufs[1].Bytes())
			lo, hi = int(o[off]), int(o[off+n])
		}
		if off != 0 || lo != 0 {
			// Offsets rebased onto the child's values [lo, hi).
			b := memory.NewResizableBuffer(mem)
			if large {
				b.Resize((n + 1) * arrow.Int64SizeBytes)
				src := arrow.Int64Traits.CastFromBytes(bufs[1].Bytes())[off : off+n+1]
				dst := arrow.Int64Traits.CastFromBytes(b.Bytes())
				for i, o := range src {
					dst[i] = o - int64(lo)
				}
			} else {
				b.Resize((n + 1) * arrow.Int32SizeBytes)
				src := arrow.Int32Traits.CastFromBytes(bufs[1].Bytes())[off : off+n+1]
				dst := arrow.Int32Traits.CastFromBytes(b.Bytes())
				for i, o := range src {
					dst[i] = o - int32(lo)
				}
			}
			fresh = append(fresh, b)
			outBufs, changed = []*memory.Buffer{validity(), b}, true
		}
		k := child(kids[0], lo, hi)
		if k != kids[0] {
			outKids, changed = []arrow.ArrayData{k}, true
		}
	default:
		// Run-end encoded, dictionaries: left as they are.
		return d, false
	}
	if !changed {
		return d, false
	}
	out := array.NewData(dt, n, outBufs, outKids, d.NullN(), 0)
	if dict := arrowcheck.Dictionary(d); dict != nil {
		out.SetDictionary(dict)
	}
	return out, true
}
