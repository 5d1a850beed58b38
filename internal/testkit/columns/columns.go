// Package columns builds Arrow columns for tests from JSON: plain, as
// dictionaries and run-end encoded, and a set of every kind of type that
// splitting or scattering a batch must carry.
package columns

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// FromJSON builds an array of dt from a JSON list.
func FromJSON(t testing.TB, dt arrow.DataType, js string) arrow.Array {
	t.Helper()
	a, _, err := array.FromJSON(memory.DefaultAllocator, dt, strings.NewReader(js))
	if err != nil {
		t.Fatalf("%s from %s: %v", dt, js, err)
	}
	t.Cleanup(a.Release)
	return a
}

func JSONList(lits []string) string { return "[" + strings.Join(lits, ",") + "]" }

// DictOf is lits as a dictionary<int32, dt> whose dictionary lists the
// distinct values in reverse order of first use, so indices differ from
// row numbers.
func DictOf(t testing.TB, dt arrow.DataType, lits []string) arrow.Array {
	t.Helper()
	var distinct []string
	for _, l := range lits {
		if l != "null" && !slices.Contains(distinct, l) {
			distinct = append(distinct, l)
		}
	}
	slices.Reverse(distinct)
	idx := make([]string, len(lits))
	for i, l := range lits {
		if l == "null" {
			idx[i] = "null"
		} else {
			idx[i] = strconv.Itoa(slices.Index(distinct, l))
		}
	}
	dict := FromJSON(t, dt, JSONList(distinct))
	indices := FromJSON(t, arrow.PrimitiveTypes.Int32, JSONList(idx))
	a := array.NewDictionaryArray(&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: dt}, indices, dict)
	t.Cleanup(a.Release)
	return a
}

// REEOf is lits run-end encoded: equal neighbours are one run.
func REEOf(t testing.TB, dt arrow.DataType, lits []string) arrow.Array {
	t.Helper()
	var vals, ends []string
	for i, l := range lits {
		if i > 0 && lits[i-1] == l {
			ends[len(ends)-1] = strconv.Itoa(i + 1)
			continue
		}
		vals = append(vals, l)
		ends = append(ends, strconv.Itoa(i+1))
	}
	a := array.NewRunEndEncodedArray(FromJSON(t, arrow.PrimitiveTypes.Int32, JSONList(ends)), FromJSON(t, dt, JSONList(vals)), len(lits), 0)
	t.Cleanup(a.Release)
	return a
}

func Base64Of(s string) string {
	if s == "null" {
		return s
	}
	u, err := strconv.Unquote(s)
	if err != nil {
		panic(err)
	}
	return strconv.Quote(base64.StdEncoding.EncodeToString([]byte(u)))
}

// CarryColumns are columns of every kind of type, n rows each: splitting
// a batch must carry all of them, whether compute.Take has a kernel for
// the type or not.
func CarryColumns(t testing.TB, n int) ([]arrow.Field, []arrow.Array) {
	t.Helper()
	lits := func(f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	col := func(dt arrow.DataType, f func(i int) string) arrow.Array { return FromJSON(t, dt, JSONList(lits(f))) }
	nullEvery := func(k int, f func(i int) string) func(i int) string {
		return func(i int) string {
			if i%k == k-1 {
				return "null"
			}
			return f(i)
		}
	}
	str := func(i int) string {
		if i%4 == 0 {
			return strconv.Quote(fmt.Sprintf("row %d, long enough not to be inlined in a view", i))
		}
		return strconv.Quote(fmt.Sprintf("r%d", i))
	}
	num := func(i int) string { return strconv.Itoa(i) }
	dec := func(i int) string { return strconv.Quote(fmt.Sprintf("%d.%02d", i, i%100)) }
	b64 := func(i int) string { return Base64Of(str(i)) }
	unionFields := []arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.StringView, Nullable: true}}
	sparse := arrow.SparseUnionOf(unionFields, []arrow.UnionTypeCode{3, 7})
	dense := arrow.DenseUnionOf(unionFields, []arrow.UnionTypeCode{3, 7})
	union := func(i int) string {
		switch i % 3 {
		case 0:
			return "[3, " + num(i) + "]"
		case 1:
			return "[7, " + str(i) + "]"
		}
		return "[3, null]"
	}
	list := func(f func(i int) string) func(i int) string {
		return func(i int) string {
			if i%5 == 4 {
				return "[]"
			}
			return "[" + f(i) + ", " + f(i+1) + "]"
		}
	}
	var fields []arrow.Field
	var cols []arrow.Array
	add := func(name string, a arrow.Array) {
		fields = append(fields, arrow.Field{Name: name, Type: a.DataType(), Nullable: true})
		cols = append(cols, a)
	}
	add("string_view", col(arrow.BinaryTypes.StringView, nullEvery(7, str)))
	add("binary_view", col(arrow.BinaryTypes.BinaryView, nullEvery(6, b64)))
	add("large_string", col(arrow.BinaryTypes.LargeString, nullEvery(5, str)))
	add("ree_int64", col(arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64), func(i int) string { return num(i / 4) }))
	add("ree_string_view", col(arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int16, arrow.BinaryTypes.StringView), nullEvery(9, func(i int) string { return str(i / 3) })))
	add("list_view", col(arrow.ListViewOf(arrow.PrimitiveTypes.Int32), nullEvery(8, list(num))))
	add("large_list_view", col(arrow.LargeListViewOf(arrow.BinaryTypes.String), list(str)))
	add("sparse_union", col(sparse, union))
	add("dense_union", col(dense, union))
	add("dictionary", DictOf(t, arrow.BinaryTypes.StringView, lits(nullEvery(4, func(i int) string { return str(i % 6) }))))
	add("uuid", col(extensions.NewUUIDType(), nullEvery(3, func(i int) string { return fmt.Sprintf(`"0190d9b4-7c3a-7f4e-9a55-%012x"`, i) })))
	add("struct_of_union", col(arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, arrow.Field{Name: "u", Type: sparse, Nullable: true}),
		nullEvery(10, func(i int) string { return `{"a": ` + num(i) + `, "u": ` + union(i) + `}` })))
	add("list_of_union", col(arrow.ListOf(dense), nullEvery(7, list(union))))
	add("fixed_list_of_union", col(arrow.FixedSizeListOf(2, sparse), func(i int) string { return "[" + union(i) + ", " + union(i+1) + "]" }))
	add("list_of_string_view", col(arrow.ListOf(arrow.BinaryTypes.StringView), list(str)))
	add("list_view_of_union", col(arrow.ListViewOf(dense), nullEvery(6, list(union))))
	add("large_list_view_of_string_view", col(arrow.LargeListViewOf(arrow.BinaryTypes.StringView), nullEvery(4, list(str))))
	add("ree_of_union", col(arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int64, sparse), func(i int) string { return union(i / 5) }))
	add("map", col(arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32), nullEvery(6, func(i int) string { return `[{"key": ` + str(i) + `, "value": ` + num(i) + `}]` })))
	add("null", col(arrow.Null, func(int) string { return "null" }))
	add("decimal32", col(&arrow.Decimal32Type{Precision: 9, Scale: 2}, nullEvery(5, dec)))
	add("decimal64", col(&arrow.Decimal64Type{Precision: 18, Scale: 2}, dec))
	add("decimal128", col(&arrow.Decimal128Type{Precision: 38, Scale: 2}, nullEvery(4, dec)))
	add("decimal256", col(&arrow.Decimal256Type{Precision: 76, Scale: 2}, dec))
	add("fixed_size_binary", col(&arrow.FixedSizeBinaryType{ByteWidth: 3}, func(i int) string { return Base64Of(strconv.Quote(fmt.Sprintf("%03d", i%1000))) }))
	add("month_day_nano", col(arrow.FixedWidthTypes.MonthDayNanoInterval, func(i int) string {
		return fmt.Sprintf(`{"months": %d, "days": %d, "nanoseconds": %d}`, i, -i, i*1000)
	}))
	add("float16", col(arrow.FixedWidthTypes.Float16, nullEvery(3, num)))
	add("timestamp", col(&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, num))
	return fields, cols
}
