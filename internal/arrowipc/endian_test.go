package arrowipc

import (
	"github.com/durashuffle/durashuffle/internal/arrowcheck"

	"bytes"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/endian"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
)

// TestSwapEndianViews checks a view's bytes after the swap: an inline
// view swaps its length only, an out-of-line one its length, buffer index
// and offset, keeping its prefix; swapping back (from big-endian, where
// the length is read big-endian) restores every byte.
func TestSwapEndianViews(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	long := "a string of more than twelve bytes"
	a, _, err := array.FromJSON(mem, arrow.BinaryTypes.StringView, strings.NewReader(`["short", "`+long+`", "twelve bytes"]`))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	le := a.Data().Buffers()[1].Bytes()[:48]
	be, err := SwapEndian(a.Data(), endian.LittleEndian, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Release()
	got := be.Buffers()[1].Bytes()[:48]
	want := append([]byte(nil), le...)
	binary.BigEndian.PutUint32(want[0:], 5)
	binary.BigEndian.PutUint32(want[16:], uint32(len(long)))
	binary.BigEndian.PutUint32(want[24:], binary.LittleEndian.Uint32(le[24:])) // buffer index
	binary.BigEndian.PutUint32(want[28:], binary.LittleEndian.Uint32(le[28:])) // offset
	binary.BigEndian.PutUint32(want[32:], 12)
	if !bytes.Equal(got, want) {
		t.Fatalf("big-endian views\n%x\nwant\n%x", got, want)
	}
	if string(got[20:24]) != long[:4] || string(got[4:9]) != "short" || string(got[36:48]) != "twelve bytes" {
		t.Errorf("prefix or inline bytes changed: %q", got)
	}
	if be.Buffers()[2] != a.Data().Buffers()[2] {
		t.Error("the data buffer of out-of-line values was copied, want it shared")
	}
	back, err := SwapEndian(be, endian.BigEndian, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Release()
	if !bytes.Equal(back.Buffers()[1].Bytes()[:48], le) {
		t.Errorf("swapped back\n%x\nwant\n%x", back.Buffers()[1].Bytes()[:48], le)
	}
}

// TestSwapEndianDecimalsAndIntervals checks the bytes of the types whose
// values are not one integer of their width.
func TestSwapEndianDecimalsAndIntervals(t *testing.T) {
	mem := memory.DefaultAllocator
	for _, tc := range []struct {
		dt   arrow.DataType
		json string
		want func(le []byte) []byte
	}{
		{&arrow.Decimal128Type{Precision: 38, Scale: 0}, `["1"]`, func(le []byte) []byte { return rev(le[:16]) }},
		{&arrow.Decimal256Type{Precision: 76, Scale: 0}, `["-2"]`, func(le []byte) []byte { return rev(le[:32]) }},
		{arrow.FixedWidthTypes.DayTimeInterval, `[{"days": 1, "milliseconds": 2}]`, func(le []byte) []byte {
			return append(rev(le[0:4]), rev(le[4:8])...)
		}},
		{arrow.FixedWidthTypes.MonthDayNanoInterval, `[{"months": 1, "days": 2, "nanoseconds": 3}]`, func(le []byte) []byte {
			return append(append(rev(le[0:4]), rev(le[4:8])...), rev(le[8:16])...)
		}},
	} {
		a, _, err := array.FromJSON(mem, tc.dt, strings.NewReader(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		le := a.Data().Buffers()[1].Bytes()
		be, err := SwapEndian(a.Data(), endian.LittleEndian, mem)
		if err != nil {
			t.Fatal(err)
		}
		want := tc.want(le)
		if got := be.Buffers()[1].Bytes()[:len(want)]; !bytes.Equal(got, want) {
			t.Errorf("%s: %x, want %x (little-endian %x)", tc.dt, got, want, le[:len(want)])
		}
		be.Release()
		a.Release()
	}
}

func rev(b []byte) []byte {
	out := make([]byte, len(b))
	reverse(out, b)
	return out
}

// sum is a checksum of every buffer of d at every depth, dictionaries
// included.
func sum(d arrow.ArrayData, h uint32) uint32 {
	for _, b := range d.Buffers() {
		if b != nil {
			h = crc32.Update(h, crc32.IEEETable, b.Bytes())
		}
	}
	for _, c := range d.Children() {
		h = sum(c, h)
	}
	if dict := dictionaryOf(d); dict != nil {
		h = sum(dict, h)
	}
	return h
}

// changed records, by type, the nodes of swapped whose new buffers differ
// in bytes from orig's; it fails on a buffer that is shared though its
// values are multi-byte.
func changed(t *testing.T, orig, swapped arrow.ArrayData, seen map[arrow.Type]bool) {
	id := arrowcheck.StorageID(orig.DataType())
	for i, b := range orig.Buffers() {
		s := swapped.Buffers()[i]
		if b == nil || b.Len() == 0 {
			continue
		}
		if s == b {
			multi := i > 0 && !(id == arrow.BOOL || id == arrow.INT8 || id == arrow.UINT8 || id == arrow.FIXED_SIZE_BINARY ||
				id == arrow.SPARSE_UNION || id == arrow.DICTIONARY && storageType(orig.DataType()).(*arrow.DictionaryType).IndexType.(arrow.FixedWidthDataType).BitWidth() == 8 || id == arrow.DENSE_UNION && i == 1 ||
				(id == arrow.STRING || id == arrow.BINARY || id == arrow.LARGE_STRING || id == arrow.LARGE_BINARY) && i == 2 ||
				(id == arrow.STRING_VIEW || id == arrow.BINARY_VIEW) && i >= 2)
			if multi {
				t.Errorf("%s: buffer %d shared, not swapped", orig.DataType(), i)
			}
			continue
		}
		if !bytes.Equal(s.Bytes(), b.Bytes()) {
			seen[id] = true
		}
	}
	for i, c := range orig.Children() {
		changed(t, c, swapped.Children()[i], seen)
	}
	if dict := dictionaryOf(orig); dict != nil {
		changed(t, dict, swapped.Dictionary(), seen)
	}
}

// TestSwapEndianCorpus swaps every column of every batch of the type
// corpus to big-endian and back: the values come back equal, the input's
// buffers are left as they were (a dictionary shared by two columns, and
// sliced batches, included), the big-endian buffers differ from the
// little-endian ones for every multi-byte type of the corpus, and no
// memory is left allocated.
func TestSwapEndianCorpus(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	cases := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(cases)
	seen := map[arrow.Type]bool{}
	for _, cs := range cases {
		for bi, b := range cs.Batches {
			for ci, c := range b.Columns() {
				before := sum(c.Data(), 0)
				be, err := SwapEndian(c.Data(), endian.LittleEndian, mem)
				if err != nil {
					t.Fatalf("%s batch %d column %d: %v", cs.Name, bi, ci, err)
				}
				changed(t, c.Data(), be, seen)
				back, err := SwapEndian(be, endian.BigEndian, mem)
				if err != nil {
					t.Fatalf("%s batch %d column %d back: %v", cs.Name, bi, ci, err)
				}
				got := array.MakeFromData(back)
				if !array.Equal(c, got) {
					t.Errorf("%s batch %d column %d: swapped twice %v, want %v", cs.Name, bi, ci, got, c)
				}
				if sum(c.Data(), 0) != before {
					t.Errorf("%s batch %d column %d: the input's buffers were written", cs.Name, bi, ci)
				}
				got.Release()
				back.Release()
				be.Release()
			}
		}
	}
	for _, id := range []arrow.Type{
		arrow.INT16, arrow.UINT16, arrow.INT32, arrow.UINT32, arrow.INT64, arrow.UINT64, arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64,
		arrow.DECIMAL32, arrow.DECIMAL64, arrow.DECIMAL128, arrow.DECIMAL256, arrow.DATE32, arrow.DATE64, arrow.TIME32, arrow.TIME64,
		arrow.TIMESTAMP, arrow.DURATION, arrow.INTERVAL_MONTHS, arrow.INTERVAL_DAY_TIME, arrow.INTERVAL_MONTH_DAY_NANO,
		arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY, arrow.STRING_VIEW, arrow.BINARY_VIEW,
		arrow.LIST, arrow.LARGE_LIST, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW, arrow.MAP, arrow.DENSE_UNION, arrow.DICTIONARY,
	} {
		if !seen[id] {
			t.Errorf("no %s buffer of the corpus changed bytes when swapped", id)
		}
	}
}
