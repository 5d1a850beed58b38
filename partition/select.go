package partition

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Row selection for the types compute.Take has no kernel for (views,
// run-end encoded, list views, sparse unions, decimal32/64, and anything
// holding one): a column's selected rows are the concatenation of the
// slices of its contiguous row runs (array.Concatenate), except for views
// (copied value by value, so a partition holds only its own rows' bytes)
// and unions (which Concatenate does not take), and the structs, lists,
// list views, run-end encoded, dictionary and extension arrays holding
// one, which are rebuilt here from their children's selections.

// rowRun is a half-open range [lo, hi) of rows.
type rowRun struct{ lo, hi int }

// runsOf merges rows into runs: consecutive rows, in the order given, make
// one run.
func runsOf(rows []int32) []rowRun {
	var out []rowRun
	for _, r := range rows {
		i := int(r)
		if n := len(out); n > 0 && out[n-1].hi == i {
			out[n-1].hi++
			continue
		}
		out = append(out, rowRun{i, i + 1})
	}
	return out
}

func runsLen(runs []rowRun) int {
	n := 0
	for _, r := range runs {
		n += r.hi - r.lo
	}
	return n
}

// gather returns the rows of a in runs, in order, as a new array of a's
// type.
func gather(a arrow.Array, runs []rowRun, mem memory.Allocator) (arrow.Array, error) {
	dt := a.DataType()
	if !needsRebuild(dt) {
		return concatRuns(a, runs, mem)
	}
	switch a := a.(type) {
	case *array.StringView:
		b := array.NewStringViewBuilder(mem)
		defer b.Release()
		b.Reserve(runsLen(runs))
		for _, r := range runs {
			for i := r.lo; i < r.hi; i++ {
				if a.IsNull(i) {
					b.AppendNull()
				} else {
					b.Append(a.Value(i))
				}
			}
		}
		return b.NewArray(), nil
	case *array.BinaryView:
		b := array.NewBinaryViewBuilder(mem)
		defer b.Release()
		b.Reserve(runsLen(runs))
		for _, r := range runs {
			for i := r.lo; i < r.hi; i++ {
				if a.IsNull(i) {
					b.AppendNull()
				} else {
					b.Append(a.Value(i))
				}
			}
		}
		return b.NewArray(), nil
	case *array.SparseUnion:
		return gatherSparseUnion(a, runs, mem)
	case *array.DenseUnion:
		return gatherDenseUnion(a, runs, mem)
	case *array.Struct:
		return gatherStruct(a, runs, mem)
	case *array.List, *array.LargeList, *array.Map, *array.FixedSizeList:
		return gatherList(a.(array.ListLike), runs, mem)
	case *array.ListView, *array.LargeListView:
		return gatherListView(a.(array.ListLike), runs, mem)
	case *array.RunEndEncoded:
		return gatherREE(a, runs, mem)
	case *array.Dictionary:
		idx, err := gather(a.Indices(), runs, mem)
		if err != nil {
			return nil, err
		}
		defer idx.Release()
		return array.NewDictionaryArray(dt, idx, a.Dictionary()), nil
	case array.ExtensionArray:
		st, err := gather(a.Storage(), runs, mem)
		if err != nil {
			return nil, err
		}
		defer st.Release()
		return array.NewExtensionArrayWithStorage(a.ExtensionType(), st), nil
	}
	return nil, fmt.Errorf("select rows of a column of type %s: a union or a view inside a %s is not supported", dt, dt.Name())
}

// concatRuns is array.Concatenate of the slices of a at runs.
func concatRuns(a arrow.Array, runs []rowRun, mem memory.Allocator) (arrow.Array, error) {
	switch len(runs) {
	case 0:
		return array.NewSlice(a, 0, 0), nil
	case 1:
		return array.NewSlice(a, int64(runs[0].lo), int64(runs[0].hi)), nil
	}
	slices := make([]arrow.Array, len(runs))
	for i, r := range runs {
		slices[i] = array.NewSlice(a, int64(r.lo), int64(r.hi))
	}
	defer func() {
		for _, s := range slices {
			s.Release()
		}
	}()
	out, err := array.Concatenate(slices, mem)
	if err != nil {
		return nil, fmt.Errorf("select rows of a column of type %s: %w", a.DataType(), err)
	}
	return out, nil
}

// hasUnion says whether dt is or holds a union.
func hasUnion(dt arrow.DataType) bool {
	switch t := dt.(type) {
	case arrow.UnionType:
		return true
	case arrow.ExtensionType:
		return hasUnion(t.StorageType())
	case *arrow.DictionaryType:
		return hasUnion(t.ValueType)
	case *arrow.RunEndEncodedType:
		return hasUnion(t.Encoded())
	case arrow.NestedType:
		for _, f := range t.Fields() {
			if hasUnion(f.Type) {
				return true
			}
		}
	}
	return false
}

// needsRebuild says whether dt is or holds a union, which Concatenate
// does not take, or a string or binary view, whose Concatenate (and
// slices) keep every data buffer of the input: a partition would carry
// the long values of all the batch's rows.
func needsRebuild(dt arrow.DataType) bool {
	switch t := dt.(type) {
	case arrow.UnionType, arrow.BinaryViewDataType:
		return true
	case arrow.ExtensionType:
		return needsRebuild(t.StorageType())
	case *arrow.DictionaryType:
		return needsRebuild(t.ValueType)
	case *arrow.RunEndEncodedType:
		return needsRebuild(t.Encoded())
	case arrow.NestedType:
		for _, f := range t.Fields() {
			if needsRebuild(f.Type) {
				return true
			}
		}
	}
	return false
}

// gatherREE selects rows of a run-end encoded array: the selected rows of
// each run are one run, and the run's value is selected once.
func gatherREE(a *array.RunEndEncoded, runs []rowRun, mem memory.Allocator) (arrow.Array, error) {
	var end func(j int) int
	switch e := a.RunEndsArr().(type) {
	case *array.Int16:
		end = func(j int) int { return int(e.Value(j)) }
	case *array.Int32:
		end = func(j int) int { return int(e.Value(j)) }
	case *array.Int64:
		end = func(j int) int { return int(e.Value(j)) }
	default:
		return nil, fmt.Errorf("run ends of type %s: want int16, int32 or int64", e.DataType())
	}
	first := a.Data().Offset()
	var phys []int32
	var ends []int64
	k := 0
	for _, r := range runs {
		for i, j := r.lo, a.GetPhysicalIndex(r.lo); i < r.hi; j++ {
			e := min(end(j)-first, r.hi)
			k += e - i
			if n := len(phys); n > 0 && phys[n-1] == int32(j) {
				ends[n-1] = int64(k)
			} else {
				phys = append(phys, int32(j))
				ends = append(ends, int64(k))
			}
			i = e
		}
	}
	values, err := gather(a.Values(), runsOf(phys), mem)
	if err != nil {
		return nil, err
	}
	defer values.Release()
	eb := array.NewBuilder(mem, a.RunEndsArr().DataType())
	defer eb.Release()
	for _, e := range ends {
		switch b := eb.(type) {
		case *array.Int16Builder:
			b.Append(int16(e))
		case *array.Int32Builder:
			b.Append(int32(e))
		case *array.Int64Builder:
			b.Append(e)
		}
	}
	re := eb.NewArray()
	defer re.Release()
	return array.NewRunEndEncodedArrayWithType(a.DataType().(*arrow.RunEndEncodedType), re, values, k, 0), nil
}

// gatherValidity returns the validity bitmap of the rows of a in runs and
// their null count; no bitmap when none is null.
func gatherValidity(a arrow.Array, runs []rowRun, n int, mem memory.Allocator) (*memory.Buffer, int) {
	if a.NullN() == 0 {
		return nil, 0
	}
	buf := memory.NewResizableBuffer(mem)
	buf.Resize(int(bitutil.BytesForBits(int64(n))))
	bm := buf.Bytes()
	clear(bm)
	k, nulls := 0, 0
	for _, r := range runs {
		for i := r.lo; i < r.hi; i++ {
			if a.IsValid(i) {
				bitutil.SetBit(bm, k)
			} else {
				nulls++
			}
			k++
		}
	}
	if nulls == 0 {
		buf.Release()
		return nil, 0
	}
	return buf, nulls
}

// gatherTypeCodes copies the type codes of the rows in runs.
func gatherTypeCodes(codes []arrow.UnionTypeCode, runs []rowRun, n int, mem memory.Allocator) *memory.Buffer {
	buf := memory.NewResizableBuffer(mem)
	buf.Resize(n)
	b := buf.Bytes()
	k := 0
	for _, r := range runs {
		for _, c := range codes[r.lo:r.hi] {
			b[k] = byte(c)
			k++
		}
	}
	return buf
}

func releaseData(ds []arrow.ArrayData) {
	for _, d := range ds {
		if d != nil {
			d.Release()
		}
	}
}

func releaseBuffers(bs []*memory.Buffer) {
	for _, b := range bs {
		if b != nil {
			b.Release()
		}
	}
}

func gatherSparseUnion(a *array.SparseUnion, runs []rowRun, mem memory.Allocator) (arrow.Array, error) {
	n := runsLen(runs)
	children := make([]arrow.ArrayData, a.NumFields())
	defer releaseData(children)
	for i := range children {
		c, err := gather(a.Field(i), runs, mem) // Field(i) is sliced as a is
		if err != nil {
			return nil, err
		}
		children[i] = c.Data()
		c.Data().Retain()
		c.Release()
	}
	bufs := []*memory.Buffer{nil, gatherTypeCodes(a.RawTypeCodes(), runs, n, mem)}
	defer releaseBuffers(bufs)
	d := array.NewData(a.DataType(), n, bufs, children, 0, 0)
	defer d.Release()
	return array.MakeFromData(d), nil
}

func gatherDenseUnion(a *array.DenseUnion, runs []rowRun, mem memory.Allocator) (arrow.Array, error) {
	n := runsLen(runs)
	ids := a.UnionType().ChildIDs()
	codes := a.RawTypeCodes()
	offs := a.RawValueOffsets()
	childRows := make([][]int32, a.NumFields())
	obuf := memory.NewResizableBuffer(mem)
	obuf.Resize(n * 4)
	ob := obuf.Bytes()
	k := 0
	for _, r := range runs {
		for i := r.lo; i < r.hi; i++ {
			c := ids[codes[i]]
			binary.LittleEndian.PutUint32(ob[4*k:], uint32(len(childRows[c])))
			childRows[c] = append(childRows[c], offs[i])
			k++
		}
	}
	bufs := []*memory.Buffer{nil, gatherTypeCodes(codes, runs, n, mem), obuf}
	defer releaseBuffers(bufs)
	children := make([]arrow.ArrayData, a.NumFields())
	defer releaseData(children)
	for i := range children {
		c, err := gather(a.Field(i), runsOf(childRows[i]), mem)
		if err != nil {
			return nil, err
		}
		children[i] = c.Data()
		c.Data().Retain()
		c.Release()
	}
	d := array.NewData(a.DataType(), n, bufs, children, 0, 0)
	defer d.Release()
	return array.MakeFromData(d), nil
}

func gatherStruct(a *array.Struct, runs []rowRun, mem memory.Allocator) (arrow.Array, error) {
	n := runsLen(runs)
	validity, nulls := gatherValidity(a, runs, n, mem)
	bufs := []*memory.Buffer{validity}
	defer releaseBuffers(bufs)
	children := make([]arrow.ArrayData, a.NumField())
	defer releaseData(children)
	for i := range children {
		c, err := gather(a.Field(i), runs, mem) // Field(i) is sliced as a is
		if err != nil {
			return nil, err
		}
		children[i] = c.Data()
		c.Data().Retain()
		c.Release()
	}
	d := array.NewData(a.DataType(), n, bufs, children, nulls, 0)
	defer d.Release()
	return array.MakeFromData(d), nil
}

// gatherList selects the rows of a list, large list, map or fixed-size
// list: each run of rows is one run of the child's values.
func gatherList(a array.ListLike, runs []rowRun, mem memory.Allocator) (arrow.Array, error) {
	n := runsLen(runs)
	childRuns := make([]rowRun, 0, len(runs))
	_, large := a.(*array.LargeList)
	_, fixed := a.(*array.FixedSizeList)
	width := 4
	if large {
		width = 8
	}
	var obuf *memory.Buffer
	var ob []byte
	if !fixed {
		obuf = memory.NewResizableBuffer(mem)
		obuf.Resize((n + 1) * width)
		ob = obuf.Bytes()
	}
	put := func(k int, v int64) {
		if large {
			binary.LittleEndian.PutUint64(ob[8*k:], uint64(v))
		} else {
			binary.LittleEndian.PutUint32(ob[4*k:], uint32(v))
		}
	}
	k, at := 0, int64(0)
	for _, r := range runs {
		lo, _ := a.ValueOffsets(r.lo)
		_, hi := a.ValueOffsets(r.hi - 1)
		if !fixed {
			for i := r.lo; i < r.hi; i++ {
				s, _ := a.ValueOffsets(i)
				put(k, at+s-lo)
				k++
			}
		}
		at += hi - lo
		if hi > lo {
			childRuns = append(childRuns, rowRun{int(lo), int(hi)})
		}
	}
	if !fixed {
		put(k, at)
	}
	validity, nulls := gatherValidity(a, runs, n, mem)
	bufs := []*memory.Buffer{validity}
	if !fixed {
		bufs = append(bufs, obuf)
	}
	defer releaseBuffers(bufs)
	child, err := gather(a.ListValues(), childRuns, mem)
	if err != nil {
		return nil, err
	}
	defer child.Release()
	d := array.NewData(a.DataType(), n, bufs, []arrow.ArrayData{child.Data()}, nulls, 0)
	defer d.Release()
	return array.MakeFromData(d), nil
}

// gatherListView selects the rows of a list view or large list view: each
// selected row's values are selected, in row order, and its offset points
// at them; a null row has size 0.
func gatherListView(a array.ListLike, runs []rowRun, mem memory.Allocator) (arrow.Array, error) {
	n := runsLen(runs)
	_, large := a.(*array.LargeListView)
	width := 4
	if large {
		width = 8
	}
	obuf, sbuf := memory.NewResizableBuffer(mem), memory.NewResizableBuffer(mem)
	obuf.Resize(n * width)
	sbuf.Resize(n * width)
	ob, sb := obuf.Bytes(), sbuf.Bytes()
	put := func(b []byte, k int, v int64) {
		if large {
			binary.LittleEndian.PutUint64(b[8*k:], uint64(v))
		} else {
			binary.LittleEndian.PutUint32(b[4*k:], uint32(v))
		}
	}
	var childRuns []rowRun
	k, at := 0, int64(0)
	for _, r := range runs {
		for i := r.lo; i < r.hi; i++ {
			lo, hi := a.ValueOffsets(i)
			if a.IsNull(i) {
				lo, hi = 0, 0
			}
			put(ob, k, at)
			put(sb, k, hi-lo)
			if hi > lo {
				if c := len(childRuns); c > 0 && childRuns[c-1].hi == int(lo) {
					childRuns[c-1].hi = int(hi)
				} else {
					childRuns = append(childRuns, rowRun{int(lo), int(hi)})
				}
			}
			at += hi - lo
			k++
		}
	}
	validity, nulls := gatherValidity(a, runs, n, mem)
	bufs := []*memory.Buffer{validity, obuf, sbuf}
	defer releaseBuffers(bufs)
	child, err := gather(a.ListValues(), childRuns, mem)
	if err != nil {
		return nil, err
	}
	defer child.Release()
	d := array.NewData(a.DataType(), n, bufs, []arrow.ArrayData{child.Data()}, nulls, 0)
	defer d.Release()
	return array.MakeFromData(d), nil
}
