package frame

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/durashuffle/durashuffle/internal/arrowcheck"
)

// validate checks that an array decoded from untrusted bytes is safe to
// read: array.Validate's structural checks (buffer sizes, first and last
// offsets, children, dictionary), plus what array.ValidateFull adds that
// reading values would otherwise trip over: offsets in order, null counts
// that match the bitmap, dictionary indices in range. It skips
// ValidateFull's UTF-8 check of every string, which costs a third of a
// frame's decoding time and cannot make a read panic.
//
// Unions are checked by arrowcheck.Unions first (arrow-go's union
// validation dereferences a missing offsets buffer), and null and
// run-end encoded arrays get the absent buffer arrow-go's validator wants
// (arrowcheck.Normalize).
func validate(a arrow.Array) error {
	if arrowcheck.NeedsNormalize(a.DataType()) {
		if err := arrowcheck.Unions(a.Data()); err != nil {
			return err
		}
		if d, changed := arrowcheck.Normalize(a.Data()); changed {
			defer d.Release()
			a = array.MakeFromData(d)
			defer a.Release()
		}
	}
	if err := array.Validate(a); err != nil {
		return err
	}
	return validateData(a.Data())
}

func validateData(d arrow.ArrayData) error {
	n, off := d.Len(), d.Offset()
	bufs := d.Buffers()
	switch d.DataType().ID() {
	case arrow.STRING, arrow.BINARY, arrow.LIST, arrow.MAP:
		if n > 0 {
			if err := ordered(arrow.Int32Traits.CastFromBytes(bufs[1].Bytes()), off, n); err != nil {
				return err
			}
		}
	case arrow.LARGE_STRING, arrow.LARGE_BINARY, arrow.LARGE_LIST:
		if n > 0 {
			if err := ordered(arrow.Int64Traits.CastFromBytes(bufs[1].Bytes()), off, n); err != nil {
				return err
			}
		}
	case arrow.DICTIONARY, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW, arrow.STRING_VIEW, arrow.BINARY_VIEW,
		arrow.RUN_END_ENCODED, arrow.SPARSE_UNION, arrow.DENSE_UNION:
		// Rare in frames: the full check (for a dictionary, its indices
		// against the dictionary, whose values it checks in full too).
		arr := array.MakeFromData(d)
		defer arr.Release()
		return array.ValidateFull(arr)
	}
	if nulls := d.NullN(); nulls != array.UnknownNullCount {
		actual := 0
		switch d.DataType().ID() {
		case arrow.NULL:
			actual = n
		default:
			if len(bufs) > 0 && bufs[0] != nil {
				actual = n - bitutil.CountSetBits(bufs[0].Bytes(), off, n)
			}
		}
		if actual != nulls {
			return fmt.Errorf("null count %d does not match the %d nulls of the validity bitmap", nulls, actual)
		}
	}
	for i, c := range d.Children() {
		if err := validateData(c); err != nil {
			return fmt.Errorf("child %d: %w", i, err)
		}
	}
	return nil
}

// ordered checks offsets[off : off+n+1]: present, non-negative and
// non-decreasing (array.Validate has checked the last one against the
// values' length).
func ordered[T int32 | int64](offsets []T, off, n int) error {
	if len(offsets) < off+n+1 {
		return fmt.Errorf("%d offsets for %d values at offset %d", len(offsets), n, off)
	}
	o := offsets[off : off+n+1]
	if o[0] < 0 {
		return fmt.Errorf("offset %d is negative", o[0])
	}
	for i := 1; i < len(o); i++ {
		if o[i] < o[i-1] {
			return fmt.Errorf("offsets decrease at value %d: %d after %d", off+i-1, o[i], o[i-1])
		}
	}
	return nil
}
