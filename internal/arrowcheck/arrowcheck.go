// Package arrowcheck holds what the write and read paths need beyond
// arrow-go's own validation to carry every valid Arrow layout:
//
//   - Unions checks sparse and dense unions the way Arrow's specification
//     asks (type ids among the union's codes, dense offsets non-negative,
//     in order and within their child, sparse children long enough)
//     without reaching arrow-go's union validation, which dereferences a
//     missing offsets buffer.
//   - Normalize gives null and run-end encoded arrays the one absent
//     validity buffer their layout declares (arrow-go's IPC reader and
//     builders make them with none, which its validator then refuses),
//     and a zero-length dense union the empty offsets buffer arrow-go's
//     union code reads.
//   - ForIPC rewrites list views and unions with a non-zero offset, at any
//     depth, to offset 0: arrow-go's IPC writer fails on sliced list views
//     and mis-slices the children of sliced dense unions.
//   - NativeMessages reads a big-endian IPC stream's messages and hands
//     them on in native byte order, every type included (arrow-go's own
//     swapper has no views, list views or run-end encoded arrays);
//     SwapEndian swaps arrays in memory the same way, into new buffers.
package arrowcheck

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Has says whether dt is, or holds at any depth (children, dictionary
// values, extension storage), a type whose ID is one of ids.
func Has(dt arrow.DataType, ids ...arrow.Type) bool {
	if dt == nil {
		return false
	}
	for _, id := range ids {
		if dt.ID() == id {
			return true
		}
	}
	switch t := dt.(type) {
	case *arrow.DictionaryType:
		return Has(t.ValueType, ids...)
	case arrow.ExtensionType:
		return Has(t.StorageType(), ids...)
	case arrow.NestedType:
		for _, f := range t.Fields() {
			if Has(f.Type, ids...) {
				return true
			}
		}
	}
	return false
}

// NeedsNormalize says whether a column of type dt may need Normalize.
func NeedsNormalize(dt arrow.DataType) bool {
	return Has(dt, arrow.NULL, arrow.RUN_END_ENCODED, arrow.DENSE_UNION, arrow.SPARSE_UNION)
}

// storageID is the type ID of dt's layout: an extension type's storage.
func StorageID(dt arrow.DataType) arrow.Type {
	if ext, ok := dt.(arrow.ExtensionType); ok {
		return StorageID(ext.StorageType())
	}
	return dt.ID()
}

// Unions checks every sparse and dense union in d, at any depth, and
// returns an error naming the union (its path below d) and what is wrong.
// It reads only union nodes' own buffers and their children's lengths;
// the rest of the tree is left to arrow-go's validation, which must come
// after (with Normalize's data).
func Unions(d arrow.ArrayData) error {
	return walkUnions(d, "")
}

func walkUnions(d arrow.ArrayData, path string) error {
	if d == nil || d.DataType() == nil {
		return nil
	}
	if id := StorageID(d.DataType()); id == arrow.SPARSE_UNION || id == arrow.DENSE_UNION {
		if err := union(d); err != nil {
			return at(path, err)
		}
	}
	for i, c := range d.Children() {
		if c == nil {
			continue // arrow-go's structure check names it
		}
		if err := walkUnions(c, join(path, childName(d.DataType(), i))); err != nil {
			return err
		}
	}
	if dict := Dictionary(d); dict != nil {
		if err := walkUnions(dict, join(path, "dictionary")); err != nil {
			return err
		}
	}
	return nil
}

// union checks one union node.
func union(d arrow.ArrayData) error {
	dt := d.DataType()
	if ext, ok := dt.(arrow.ExtensionType); ok {
		dt = ext.StorageType()
	}
	ut := dt.(arrow.UnionType)
	dense := ut.Mode() == arrow.DenseMode
	kind := "sparse union"
	want := 2 // an absent validity bitmap and the type ids
	if dense {
		kind, want = "dense union", 3 // and the offsets
	}
	off, n := d.Offset(), d.Len()
	if off < 0 || n < 0 || off > int(^uint(0)>>1)-n {
		return fmt.Errorf("%s: offset %d and length %d are negative or overflow", kind, off, n)
	}
	bufs := d.Buffers()
	if len(bufs) != want {
		return fmt.Errorf("%s: %d buffers, want %d", kind, len(bufs), want)
	}
	if bufs[0] != nil {
		return fmt.Errorf("%s: has a validity bitmap: a union has none (its nulls are its children's)", kind)
	}
	if nulls := d.NullN(); nulls != 0 && nulls != array.UnknownNullCount {
		return fmt.Errorf("%s: null count %d: a union has none of its own", kind, nulls)
	}
	fields, codes, ids := ut.Fields(), ut.TypeCodes(), ut.ChildIDs()
	children := d.Children()
	if len(children) != len(fields) {
		return fmt.Errorf("%s: %d children, the type has %d fields", kind, len(children), len(fields))
	}
	for i, c := range children {
		switch {
		case c == nil:
			return fmt.Errorf("%s: child %d %q is missing", kind, i, fields[i].Name)
		case !arrow.TypeEqual(c.DataType(), fields[i].Type):
			return fmt.Errorf("%s: child %d %q is of type %s, the field of %s", kind, i, fields[i].Name, c.DataType(), fields[i].Type)
		case !dense && c.Len() < off+n:
			return fmt.Errorf("%s: child %d %q has %d values, the union %d (offset %d and length %d)", kind, i, fields[i].Name, c.Len(), off+n, off, n)
		}
	}
	if n == 0 {
		return nil
	}
	if bufs[1] == nil || bufs[1].Len() < off+n {
		return fmt.Errorf("%s: type ids buffer is missing or shorter (%d bytes) than offset %d and length %d", kind, bufLen(bufs[1]), off, n)
	}
	types := arrow.Int8Traits.CastFromBytes(bufs[1].Bytes())[off : off+n]
	for i, code := range types {
		if code < 0 || ids[code] == arrow.InvalidUnionChildID {
			return fmt.Errorf("%s: value %d has type id %d, not one of the union's type codes %v", kind, i, code, codes)
		}
	}
	if !dense {
		return nil
	}
	if bufs[2] == nil || bufs[2].Len()/arrow.Int32SizeBytes < off+n {
		return fmt.Errorf("%s: offsets buffer is missing or shorter (%d bytes) than offset %d and length %d of 4-byte offsets", kind, bufLen(bufs[2]), off, n)
	}
	offsets := arrow.Int32Traits.CastFromBytes(bufs[2].Bytes())[off : off+n]
	last := make([]int32, len(children))
	for i, o := range offsets {
		c := ids[types[i]]
		switch l := children[c].Len(); {
		case o < 0:
			return fmt.Errorf("%s: value %d (type id %d) has a negative offset %d", kind, i, types[i], o)
		case int(o) >= l:
			return fmt.Errorf("%s: value %d (type id %d) has offset %d, past the %d values of child %d %q", kind, i, types[i], o, l, c, fields[c].Name)
		case o < last[c]:
			return fmt.Errorf("%s: value %d (type id %d) has offset %d, before the offset %d of the child's value before it", kind, i, types[i], o, last[c])
		}
		last[c] = o
	}
	return nil
}

// Dictionary is d's dictionary, or nil: arrow-go returns a nil *array.Data
// in the interface when there is none.
func Dictionary(d arrow.ArrayData) arrow.ArrayData {
	if dd, ok := d.Dictionary().(*array.Data); ok && dd == nil {
		return nil
	}
	return d.Dictionary()
}

func bufLen(b *memory.Buffer) int {
	if b == nil {
		return 0
	}
	return b.Len()
}

func childName(dt arrow.DataType, i int) string {
	if n, ok := dt.(arrow.NestedType); ok && i < len(n.Fields()) {
		return fmt.Sprintf("child %d %q", i, n.Fields()[i].Name)
	}
	return fmt.Sprintf("child %d", i)
}

func join(path, child string) string {
	if path == "" {
		return child
	}
	return path + ": " + child
}

func at(path string, err error) error {
	if path == "" {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// Normalize returns d, or when d or a descendant (child, dictionary) is
// a null or run-end encoded array without buffers or a zero-length dense
// union without offsets, a new ArrayData (changed true; the caller's to
// release) with the buffer added: nil for the absent validity, an empty
// buffer for the offsets. The values are the same.
func Normalize(d arrow.ArrayData) (_ arrow.ArrayData, changed bool) {
	if d == nil || d.DataType() == nil {
		return d, false
	}
	bufs := d.Buffers()
	switch StorageID(d.DataType()) {
	case arrow.NULL, arrow.RUN_END_ENCODED:
		if len(bufs) == 0 {
			bufs, changed = []*memory.Buffer{nil}, true
		}
	case arrow.DENSE_UNION:
		if len(bufs) == 3 && bufs[2] == nil && d.Len() == 0 {
			bufs, changed = []*memory.Buffer{bufs[0], bufs[1], memory.NewBufferBytes(nil)}, true
		}
	}
	children := d.Children()
	var kids []arrow.ArrayData
	for i, c := range children {
		if nc, ch := Normalize(c); ch {
			if kids == nil {
				kids = append([]arrow.ArrayData(nil), children...)
			}
			kids[i], changed = nc, true
			defer nc.Release() // NewData retains it
		}
	}
	dict := Dictionary(d)
	if dict != nil {
		if nd, ch := Normalize(dict); ch {
			dict, changed = nd, true
			defer nd.Release()
		}
	}
	if !changed {
		return d, false
	}
	if kids == nil {
		kids = children
	}
	out := array.NewData(d.DataType(), d.Len(), bufs, kids, d.NullN(), d.Offset())
	if dict != nil {
		out.SetDictionary(dict)
	}
	return out, true
}

// NormalizeBatch is Normalize for every column of rec: rec itself (not
// retained) when nothing changes, else a new batch (changed true) that
// the caller releases.
func NormalizeBatch(rec arrow.RecordBatch) (_ arrow.RecordBatch, changed bool) {
	return RewriteColumns(rec, NeedsNormalize, Normalize)
}

// rewriteColumns applies rewrite to each column of rec whose type needs
// it: rec itself (not retained) when no column changes, else a new batch
// (changed true) holding the rewritten columns and rec's others, which
// the caller releases.
func RewriteColumns(rec arrow.RecordBatch, needs func(arrow.DataType) bool, rewrite func(arrow.ArrayData) (arrow.ArrayData, bool)) (_ arrow.RecordBatch, changed bool) {
	var cols []arrow.Array
	for i, c := range rec.Columns() {
		if !needs(c.DataType()) {
			continue
		}
		nd, changed := rewrite(c.Data())
		if !changed {
			continue
		}
		if cols == nil {
			cols = append([]arrow.Array(nil), rec.Columns()...)
			for _, c := range cols {
				c.Retain()
			}
		}
		cols[i].Release()
		cols[i] = array.MakeFromData(nd)
		nd.Release()
	}
	if cols == nil {
		return rec, false
	}
	out := array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out, true
}
