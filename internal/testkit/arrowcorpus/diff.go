package arrowcorpus

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Diff compares two streams of record batches, the one written (want)
// and the one read back (got), and returns nil when they are equal, or
// an error naming the first difference: the schema (types, names,
// nullability, field-level metadata at every depth, schema-level
// metadata) or the first row and column whose values differ. Batch
// boundaries do not count: a stream is its rows in order. Values are
// compared as what they mean, not how they are laid out: a dictionary
// value by the value its index points at (the dictionaries may differ
// from batch to batch), a run-end encoded value by its run's value, a
// float by its bits (NaN equals the same NaN, -0 differs from 0).
func Diff(wantSchema *arrow.Schema, want []arrow.RecordBatch, gotSchema *arrow.Schema, got []arrow.RecordBatch) error {
	if err := DiffSchema(wantSchema, gotSchema); err != nil {
		return err
	}
	for i, b := range got {
		if !b.Schema().Equal(gotSchema) {
			return fmt.Errorf("batch %d read back has schema %s, the stream %s", i, b.Schema(), gotSchema)
		}
	}
	w, g := cursor{batches: want}, cursor{batches: got}
	row := int64(0)
	for {
		wb, wi, wok := w.next()
		gb, gi, gok := g.next()
		switch {
		case !wok && !gok:
			return nil
		case !wok:
			return fmt.Errorf("row %d: read back, but only %d rows were written", row, row)
		case !gok:
			return fmt.Errorf("row %d: written, but only %d rows were read back", row, row)
		}
		for c := range wantSchema.NumFields() {
			if err := valueDiff(wb.Column(c), wi, gb.Column(c), gi); err != nil {
				f := wantSchema.Field(c)
				return fmt.Errorf("row %d column %d %q (%s): %w", row, c, f.Name, f.Type, err)
			}
		}
		row++
	}
}

// DiffSchema compares two schemas, metadata included at every depth.
func DiffSchema(want, got *arrow.Schema) error {
	if got == nil {
		return fmt.Errorf("no schema read back, want %s", want)
	}
	if !want.Metadata().Equal(got.Metadata()) {
		return fmt.Errorf("schema metadata %v, want %v", got.Metadata(), want.Metadata())
	}
	if want.NumFields() != got.NumFields() {
		return fmt.Errorf("%d fields read back, want %d: %s", got.NumFields(), want.NumFields(), got)
	}
	for i := range want.NumFields() {
		if err := fieldDiff(want.Field(i), got.Field(i)); err != nil {
			return fmt.Errorf("field %d: %w", i, err)
		}
	}
	return nil
}

func fieldDiff(want, got arrow.Field) error {
	switch {
	case want.Name != got.Name:
		return fmt.Errorf("name %q, want %q", got.Name, want.Name)
	case want.Nullable != got.Nullable:
		return fmt.Errorf("%q: nullable %v, want %v", want.Name, got.Nullable, want.Nullable)
	case !arrow.TypeEqual(want.Type, got.Type, arrow.CheckMetadata()):
		return fmt.Errorf("%q: type %s, want %s", want.Name, got.Type, want.Type)
	case !want.Metadata.Equal(got.Metadata):
		return fmt.Errorf("%q: metadata %v, want %v", want.Name, got.Metadata, want.Metadata)
	}
	if ext, ok := want.Type.(arrow.ExtensionType); ok {
		gext := got.Type.(arrow.ExtensionType)
		if ext.Serialize() != gext.Serialize() {
			return fmt.Errorf("%q: extension metadata %q, want %q", want.Name, gext.Serialize(), ext.Serialize())
		}
	}
	return nil
}

// cursor walks the rows of a stream of batches.
type cursor struct {
	batches []arrow.RecordBatch
	b       int
	i       int64
}

func (c *cursor) next() (arrow.RecordBatch, int, bool) {
	for c.b < len(c.batches) && c.i >= c.batches[c.b].NumRows() {
		c.b, c.i = c.b+1, 0
	}
	if c.b == len(c.batches) {
		return nil, 0, false
	}
	i := c.i
	c.i++
	return c.batches[c.b], int(i), true
}

// valueDiff compares value i of a with value j of b, both of one type.
func valueDiff(a arrow.Array, i int, b arrow.Array, j int) error {
	if !arrow.TypeEqual(a.DataType(), b.DataType()) {
		return fmt.Errorf("type %s, want %s", b.DataType(), a.DataType())
	}
	switch a := a.(type) {
	case *array.Dictionary:
		b := b.(*array.Dictionary)
		if a.IsNull(i) || b.IsNull(j) {
			return nullDiff(a.IsNull(i), b.IsNull(j))
		}
		if err := valueDiff(a.Dictionary(), a.GetValueIndex(i), b.Dictionary(), b.GetValueIndex(j)); err != nil {
			return fmt.Errorf("dictionary value: %w", err)
		}
		return nil
	case *array.RunEndEncoded:
		b := b.(*array.RunEndEncoded)
		return valueDiff(a.Values(), a.GetPhysicalIndex(i), b.Values(), b.GetPhysicalIndex(j))
	case array.ExtensionArray:
		return valueDiff(a.Storage(), i, b.(array.ExtensionArray).Storage(), j)
	case array.Union:
		b := b.(array.Union)
		if a.TypeCode(i) != b.TypeCode(j) {
			return fmt.Errorf("union type code %d, want %d", b.TypeCode(j), a.TypeCode(i))
		}
		ai, bj := i, j
		if d, ok := a.(*array.DenseUnion); ok {
			ai, bj = int(d.ValueOffset(i)), int(b.(*array.DenseUnion).ValueOffset(j))
		}
		c := a.ChildID(i)
		if err := valueDiff(a.Field(c), ai, b.Field(c), bj); err != nil {
			return fmt.Errorf("union child %d: %w", c, err)
		}
		return nil
	}
	if a.IsNull(i) || b.IsNull(j) {
		return nullDiff(a.IsNull(i), b.IsNull(j))
	}
	switch a := a.(type) {
	case *array.Null:
		return nil
	case *array.Struct:
		b := b.(*array.Struct)
		for k := range a.NumField() {
			if err := valueDiff(a.Field(k), i, b.Field(k), j); err != nil {
				return fmt.Errorf("struct field %d: %w", k, err)
			}
		}
		return nil
	case array.ListLike: // list, large list, list view, fixed-size list, map
		b := b.(array.ListLike)
		alo, ahi := a.ValueOffsets(i)
		blo, bhi := b.ValueOffsets(j)
		if ahi-alo != bhi-blo {
			return fmt.Errorf("%d items, want %d", bhi-blo, ahi-alo)
		}
		for k := range ahi - alo {
			if err := valueDiff(a.ListValues(), int(alo+k), b.ListValues(), int(blo+k)); err != nil {
				return fmt.Errorf("item %d: %w", k, err)
			}
		}
		return nil
	case *array.Float16:
		if x, y := a.Value(i), b.(*array.Float16).Value(j); x.Uint16() != y.Uint16() {
			return fmt.Errorf("%v (bits %#x), want %v (bits %#x)", y, y.Uint16(), x, x.Uint16())
		}
		return nil
	case *array.Float32:
		if x, y := a.Value(i), b.(*array.Float32).Value(j); math.Float32bits(x) != math.Float32bits(y) {
			return fmt.Errorf("%v, want %v", y, x)
		}
		return nil
	case *array.Float64:
		if x, y := a.Value(i), b.(*array.Float64).Value(j); math.Float64bits(x) != math.Float64bits(y) {
			return fmt.Errorf("%v, want %v", y, x)
		}
		return nil
	}
	if !array.SliceEqual(a, int64(i), int64(i+1), b, int64(j), int64(j+1)) {
		return fmt.Errorf("%s, want %s", b.ValueStr(j), a.ValueStr(i))
	}
	return nil
}

func nullDiff(wantNull, gotNull bool) error {
	switch {
	case wantNull && !gotNull:
		return fmt.Errorf("a value, want null")
	case !wantNull && gotNull:
		return fmt.Errorf("null, want a value")
	}
	return nil
}
