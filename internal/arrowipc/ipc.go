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
	r := &rebase{mem: mem, off: d.Offset(), n: d.Len(), bufs: d.Buffers(), kids: d.Children()}
	defer r.release()
	var bufs []*memory.Buffer
	var kids []arrow.ArrayData
	switch id := arrowcheck.StorageID(dt); id {
	case arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW:
		w := arrow.Int32SizeBytes
		if id == arrow.LARGE_LIST_VIEW {
			w = arrow.Int64SizeBytes
		}
		if r.off != 0 {
			bufs = []*memory.Buffer{r.validity(), r.slice(r.bufs[1], w), r.slice(r.bufs[2], w)}
		}
		kids = r.children(0, -1)
	case arrow.DENSE_UNION:
		if r.off != 0 {
			bufs = []*memory.Buffer{nil, r.slice(r.bufs[1], 1), r.slice(r.bufs[2], arrow.Int32SizeBytes)}
		}
		kids = r.children(0, -1)
	case arrow.SPARSE_UNION:
		if r.off != 0 {
			bufs = []*memory.Buffer{nil, r.slice(r.bufs[1], 1)}
		}
		kids = r.children(r.off, r.off+r.n)
	case arrow.STRUCT:
		if r.off != 0 {
			bufs = []*memory.Buffer{r.validity()}
		}
		kids = r.children(r.off, r.off+r.n)
	case arrow.FIXED_SIZE_LIST:
		size := int(storage(dt).(*arrow.FixedSizeListType).Len())
		if r.off != 0 {
			bufs = []*memory.Buffer{r.validity()}
		}
		kids = r.children(r.off*size, (r.off+r.n)*size)
	case arrow.LIST, arrow.MAP, arrow.LARGE_LIST:
		bufs, kids = r.list(id == arrow.LARGE_LIST)
	default:
		// Run-end encoded, dictionaries: left as they are.
		return d, false
	}
	if bufs == nil && kids == nil {
		return d, false
	}
	if bufs == nil {
		bufs = r.bufs
	}
	if kids == nil {
		kids = r.kids
	}
	out := array.NewData(dt, r.n, bufs, kids, d.NullN(), 0)
	if dict := arrowcheck.Dictionary(d); dict != nil {
		out.SetDictionary(dict)
	}
	return out, true
}

// storage is dt, or an extension type's storage type.
func storage(dt arrow.DataType) arrow.DataType {
	if ext, ok := dt.(arrow.ExtensionType); ok {
		return ext.StorageType()
	}
	return dt
}

// rebase is one array's rewrite to offset 0: its offset and length, its
// buffers and children, and what the rewrite made (released once the
// new ArrayData holds its own references).
type rebase struct {
	mem    memory.Allocator
	off, n int
	bufs   []*memory.Buffer
	kids   []arrow.ArrayData
	fresh  []*memory.Buffer
	made   []arrow.ArrayData
}

func (r *rebase) release() {
	for _, b := range r.fresh {
		b.Release()
	}
	for _, k := range r.made {
		k.Release()
	}
}

// children returns every child's values [lo, hi) (hi < 0: the whole
// child) with no offset below, or nil when none changed.
func (r *rebase) children(lo, hi int) []arrow.ArrayData {
	out := make([]arrow.ArrayData, len(r.kids))
	changed := false
	for i, c := range r.kids {
		h := hi
		if h < 0 {
			h = c.Len()
		}
		out[i] = r.child(c, lo, h)
		changed = changed || out[i] != c
	}
	if !changed {
		return nil
	}
	return out
}

// child returns c's values [lo, hi) with no offset below.
func (r *rebase) child(c arrow.ArrayData, lo, hi int) arrow.ArrayData {
	if lo != 0 || hi != c.Len() {
		s := array.NewSliceData(c, int64(lo), int64(hi))
		if nc, ch := zeroOffset(s, r.mem); ch {
			s.Release()
			s = nc
		}
		r.made = append(r.made, s)
		return s
	}
	nc, ch := zeroOffset(c, r.mem)
	if ch {
		r.made = append(r.made, nc)
	}
	return nc
}

// validity returns the validity bitmap of the array's values at offset
// 0: the one it has when its offset is 0, else a copy.
func (r *rebase) validity() *memory.Buffer {
	if len(r.bufs) == 0 {
		return nil
	}
	if r.bufs[0] == nil || r.off == 0 {
		return r.bufs[0]
	}
	b := memory.NewResizableBuffer(r.mem)
	b.Resize(int(bitutil.BytesForBits(int64(r.n))))
	bitutil.CopyBitmap(r.bufs[0].Bytes(), r.off, r.n, b.Bytes(), 0)
	r.fresh = append(r.fresh, b)
	return b
}

// slice returns b's values of width bytes from the array's offset.
func (r *rebase) slice(b *memory.Buffer, width int) *memory.Buffer {
	if b == nil {
		return nil
	}
	s := memory.SliceBuffer(b, r.off*width, r.n*width)
	r.fresh = append(r.fresh, s)
	return s
}

// list rewrites a list or map: its offsets rebased onto its child's
// values [lo, hi), the child sliced to them. Nil, nil: nothing changed.
func (r *rebase) list(large bool) ([]*memory.Buffer, []arrow.ArrayData) {
	if r.n == 0 {
		return []*memory.Buffer{nil, nil}, []arrow.ArrayData{r.child(r.kids[0], 0, 0)}
	}
	var lo, hi int
	if large {
		o := arrow.Int64Traits.CastFromBytes(r.bufs[1].Bytes())
		lo, hi = int(o[r.off]), int(o[r.off+r.n])
	} else {
		o := arrow.Int32Traits.CastFromBytes(r.bufs[1].Bytes())
		lo, hi = int(o[r.off]), int(o[r.off+r.n])
	}
	var bufs []*memory.Buffer
	if r.off != 0 || lo != 0 {
		b := memory.NewResizableBuffer(r.mem)
		if large {
			b.Resize((r.n + 1) * arrow.Int64SizeBytes)
			rebaseOffsets(arrow.Int64Traits.CastFromBytes(b.Bytes()), arrow.Int64Traits.CastFromBytes(r.bufs[1].Bytes())[r.off:r.off+r.n+1], int64(lo))
		} else {
			b.Resize((r.n + 1) * arrow.Int32SizeBytes)
			rebaseOffsets(arrow.Int32Traits.CastFromBytes(b.Bytes()), arrow.Int32Traits.CastFromBytes(r.bufs[1].Bytes())[r.off:r.off+r.n+1], int32(lo))
		}
		r.fresh = append(r.fresh, b)
		bufs = []*memory.Buffer{r.validity(), b}
	}
	var kids []arrow.ArrayData
	if k := r.child(r.kids[0], lo, hi); k != r.kids[0] {
		kids = []arrow.ArrayData{k}
	}
	return bufs, kids
}

func rebaseOffsets[T int32 | int64](dst, src []T, lo T) {
	for i, o := range src {
		dst[i] = o - lo
	}
}
