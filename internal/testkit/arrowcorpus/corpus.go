// Package arrowcorpus is a corpus of valid Arrow record batches: named
// cases, each a schema and its batches, that together cover every Arrow
// type durashuffle carries and the edge cases of their layouts (nulls at
// the first and last row, empty strings and lists, slices with a non-zero
// offset, zero-row batches, dictionaries that change from batch to batch,
// schema- and field-level metadata). Tests run it through every entry and
// exit of the library, the command line and the sidecar, and compare what
// comes back with Diff.
//
// The API is small on purpose: Cases, Case.Release and Diff.
package arrowcorpus

import (
	"fmt"
	"github.com/durashuffle/durashuffle/internal/arrowcheck"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Case is one named schema and its batches, in order. Batches may be
// empty (a stream with no batches) or hold zero-row batches.
type Case struct {
	Name    string
	Schema  *arrow.Schema
	Batches []arrow.RecordBatch
	// Replaces is set when a dictionary of the case changes from one
	// batch to the next (replaced, or grown): arrow-go's IPC file writer
	// refuses that (a file holds one dictionary per field; arrow-go writes
	// no delta dictionaries in files), a stream carries it (a growth as a
	// delta dictionary batch with ipc.WithDictionaryDeltas).
	Replaces bool
}

// Rows is the number of rows of the case's batches.
func (c Case) Rows() int64 {
	var n int64
	for _, b := range c.Batches {
		n += b.NumRows()
	}
	return n
}

// Release releases the case's batches.
func (c Case) Release() {
	for _, b := range c.Batches {
		b.Release()
	}
}

// Release releases every case's batches.
func Release(cases []Case) {
	for _, c := range cases {
		c.Release()
	}
}

// Cases builds the corpus with mem. Every batch passes
// array.ValidateRecordFull's checks except where Arrow's own layout
// allows what arrow-go's validator does not know (none today). The
// caller releases the batches (Release).
func Cases(mem memory.Allocator) []Case {
	var out []Case
	for _, mk := range builders {
		out = append(out, mk(mem))
	}
	return out
}

var builders = []func(memory.Allocator) Case{
	nullCase, boolCase, intCase, floatCase, decimalCase, temporalCase, intervalCase,
	binaryCase, viewCase, listCase, listViewCase, structCase, mapCase, unionCase,
	dictCase, dictDeltaCase, dictChangeCase, dictSharedCase, dictNestedCase,
	reeCase, extensionCase, metadataCase, zeroRowsCase, noBatchesCase,
}

var nullable = true

// field is a nullable field.
func field(name string, dt arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: dt, Nullable: nullable}
}

// fromJSON builds one batch of sc from rows of JSON objects, with
// arrow-go's builders (array.RecordFromJSON); a bad literal is a bug of
// the corpus and panics.
func fromJSON(mem memory.Allocator, sc *arrow.Schema, rows string) arrow.RecordBatch {
	rec, _, err := array.RecordFromJSON(mem, sc, strings.NewReader(rows))
	if err != nil {
		panic(fmt.Sprintf("arrowcorpus: %s: %v", sc, err))
	}
	return rec
}

// split returns rec cut in three batches at rows a and b (0 < a <= b <=
// rows): the second and third are slices with non-zero offsets.
func split(rec arrow.RecordBatch, a, b int64) []arrow.RecordBatch {
	defer rec.Release()
	n := rec.NumRows()
	return []arrow.RecordBatch{rec.NewSlice(0, a), rec.NewSlice(a, b), rec.NewSlice(b, n)}
}

// jsonCase is a case of one schema and JSON rows, split in three batches
// at a and b, plus a second batch built from more rows.
func jsonCase(mem memory.Allocator, name string, sc *arrow.Schema, rows, more string, a, b int64) Case {
	batches := split(fromJSON(mem, sc, rows), a, b)
	if more != "" {
		batches = append(batches, fromJSON(mem, sc, more))
	}
	return Case{Name: name, Schema: sc, Batches: batches}
}

func nullCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{field("x", arrow.Null), field("i", arrow.PrimitiveTypes.Int32), field("y", arrow.Null)}, nil)
	return jsonCase(mem, "null", sc,
		`[{"x": null, "i": 1}, {"i": null}, {"i": 3}, {"i": 4}, {"i": 5}]`,
		`[{"i": 6}]`, 2, 3)
}

func boolCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{field("b", arrow.FixedWidthTypes.Boolean), {Name: "nn", Type: arrow.FixedWidthTypes.Boolean}}, nil)
	var rows []string
	for i := range 21 { // more than a byte of bits, cut inside a byte
		v := fmt.Sprint(i%3 == 0)
		if i == 0 || i == 20 || i%5 == 2 {
			v = "null"
		}
		rows = append(rows, fmt.Sprintf(`{"b": %s, "nn": %v}`, v, i%2 == 0))
	}
	return jsonCase(mem, "bool", sc, "["+strings.Join(rows, ",")+"]", `[{"b": true, "nn": false}]`, 3, 11)
}

func intCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("i8", arrow.PrimitiveTypes.Int8), field("i16", arrow.PrimitiveTypes.Int16),
		field("i32", arrow.PrimitiveTypes.Int32), field("i64", arrow.PrimitiveTypes.Int64),
		field("u8", arrow.PrimitiveTypes.Uint8), field("u16", arrow.PrimitiveTypes.Uint16),
		field("u32", arrow.PrimitiveTypes.Uint32), field("u64", arrow.PrimitiveTypes.Uint64),
	}, nil)
	return jsonCase(mem, "integers", sc, `[
		{"i8": null, "i16": null, "i32": null, "i64": null, "u8": null, "u16": null, "u32": null, "u64": null},
		{"i8": -128, "i16": -32768, "i32": -2147483648, "i64": -9223372036854775808, "u8": 0, "u16": 0, "u32": 0, "u64": 0},
		{"i8": 127, "i16": 32767, "i32": 2147483647, "i64": 9223372036854775807, "u8": 255, "u16": 65535, "u32": 4294967295, "u64": 18446744073709551615},
		{"i8": 0, "i16": -1, "i32": 1, "i64": -1, "u8": 1, "u16": 2, "u32": 3, "u64": 9007199254740993},
		{"i8": null, "i16": 7, "i32": null, "i64": 7, "u8": null, "u16": 7, "u32": null, "u64": null}]`,
		`[{"i8": 1, "i16": 2, "i32": 3, "i64": 4, "u8": 5, "u16": 6, "u32": 7, "u64": 8}]`, 1, 3)
}

func floatCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("f16", arrow.FixedWidthTypes.Float16), field("f32", arrow.PrimitiveTypes.Float32), field("f64", arrow.PrimitiveTypes.Float64),
	}, nil)
	return jsonCase(mem, "floats", sc, `[
		{"f16": null, "f32": null, "f64": null},
		{"f16": 1.5, "f32": -0.0, "f64": 0.1},
		{"f16": -65504, "f32": 3.4028235e38, "f64": 1.7976931348623157e308},
		{"f16": 0.000061035156, "f32": 1e-45, "f64": 5e-324},
		{"f16": 2, "f32": -1.25, "f64": null}]`,
		`[{"f16": null, "f32": 2.5, "f64": -2.5}]`, 2, 4)
}

func decimalCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("d32", &arrow.Decimal32Type{Precision: 9, Scale: 2}),
		field("d64", &arrow.Decimal64Type{Precision: 18, Scale: 3}),
		field("d128", &arrow.Decimal128Type{Precision: 38, Scale: 10}),
		field("d256", &arrow.Decimal256Type{Precision: 76, Scale: 20}),
	}, nil)
	return jsonCase(mem, "decimals", sc, `[
		{"d32": null, "d64": null, "d128": null, "d256": null},
		{"d32": "1234567.89", "d64": "-123456789012345.678", "d128": "1234567890123456789012345678.0123456789", "d256": "-12345678901234567890123456789012345678901234567890123456.12345678901234567890"},
		{"d32": "0.00", "d64": "0.001", "d128": "-0.0000000001", "d256": "0"},
		{"d32": "-9999999.99", "d64": null, "d128": "1", "d256": null}]`,
		`[{"d32": "1.5", "d64": "2.5", "d128": "3.5", "d256": "4.5"}]`, 1, 2)
}

func temporalCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("date32", arrow.FixedWidthTypes.Date32), field("date64", arrow.FixedWidthTypes.Date64),
		field("t32s", arrow.FixedWidthTypes.Time32s), field("t32ms", arrow.FixedWidthTypes.Time32ms),
		field("t64us", arrow.FixedWidthTypes.Time64us), field("t64ns", arrow.FixedWidthTypes.Time64ns),
		field("ts_s", &arrow.TimestampType{Unit: arrow.Second}),
		field("ts_ms", &arrow.TimestampType{Unit: arrow.Millisecond}),
		field("ts_us_utc", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}),
		field("ts_ns_ny", &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "America/New_York"}),
		field("ts_ms_off", &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "+05:30"}),
		field("dur_s", arrow.FixedWidthTypes.Duration_s), field("dur_ms", arrow.FixedWidthTypes.Duration_ms),
		field("dur_us", arrow.FixedWidthTypes.Duration_us), field("dur_ns", arrow.FixedWidthTypes.Duration_ns),
	}, nil)
	// Timestamps in their unit since the epoch: the first day of year 1
	// and the last second of 9999 where the unit reaches them.
	row := func(d int, sec int64, dur int64) string {
		ns := sec
		if ns > -9_000_000_000 && ns < 9_000_000_000 {
			ns *= 1_000_000_000
		}
		return fmt.Sprintf(`{"date32": %d, "date64": %d, "t32s": %d, "t32ms": %d, "t64us": %d, "t64ns": %d,
			"ts_s": %d, "ts_ms": %d, "ts_us_utc": %d, "ts_ns_ny": %d, "ts_ms_off": %d,
			"dur_s": %d, "dur_ms": %d, "dur_us": %d, "dur_ns": %d}`,
			d, int64(d)*86_400_000, (d%86400+86400)%86400, (d%86_400_000+86_400_000)%86_400_000,
			(int64(d)*1_000_001%86_400_000_000+86_400_000_000)%86_400_000_000,
			(int64(d)*999_999_937%86_400_000_000_000+86_400_000_000_000)%86_400_000_000_000,
			sec, sec*1000, sec*1_000_000, ns, sec*1000+7, dur, dur*7, dur*11, dur*13)
	}
	return jsonCase(mem, "temporal", sc, "["+strings.Join([]string{
		`{}`,
		row(0, 0, 0),
		row(19000, 1641645296, -5),
		row(-719162, -62135596800, 1<<40),
		row(2932896, 253402300799, -(1 << 40)),
		`{"date32": 1}`,
	}, ",")+"]", "["+row(7, 1709168523, 3)+"]", 2, 5)
}

func intervalCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("months", arrow.FixedWidthTypes.MonthInterval),
		field("day_time", arrow.FixedWidthTypes.DayTimeInterval),
		field("mdn", arrow.FixedWidthTypes.MonthDayNanoInterval),
	}, nil)
	return jsonCase(mem, "intervals", sc, `[
		{"months": null, "day_time": null, "mdn": null},
		{"months": {"months": 14}, "day_time": {"days": 3, "milliseconds": -1000}, "mdn": {"months": -1, "days": 30, "nanoseconds": 9223372036854775807}},
		{"months": {"months": -2147483648}, "day_time": {"days": 0, "milliseconds": 0}, "mdn": {"months": 0, "days": 0, "nanoseconds": 0}},
		{"months": {"months": 1}, "day_time": null, "mdn": {"months": 2147483647, "days": -2147483648, "nanoseconds": -1}}]`,
		`[{"months": {"months": 5}, "day_time": {"days": 1, "milliseconds": 1}, "mdn": null}]`, 1, 2)
}

func binaryCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("utf8", arrow.BinaryTypes.String), field("large_utf8", arrow.BinaryTypes.LargeString),
		field("binary", arrow.BinaryTypes.Binary), field("large_binary", arrow.BinaryTypes.LargeBinary),
		field("fsb", &arrow.FixedSizeBinaryType{ByteWidth: 3}),
		{Name: "utf8_nn", Type: arrow.BinaryTypes.String},
	}, nil)
	// Binary literals are base64.
	return jsonCase(mem, "binary", sc, `[
		{"utf8": null, "large_utf8": null, "binary": null, "large_binary": null, "fsb": null, "utf8_nn": ""},
		{"utf8": "", "large_utf8": "", "binary": "", "large_binary": "", "fsb": "AAAA", "utf8_nn": "a,b\"c\nd"},
		{"utf8": "héllo wörld ✓ 😀", "large_utf8": "日本語", "binary": "AP8Q", "large_binary": "3q2+7w==", "fsb": "////", "utf8_nn": "\t tab"},
		{"utf8": "a string longer than twelve bytes", "large_utf8": "x", "binary": "AA==", "large_binary": "", "fsb": "YWJj", "utf8_nn": "z"},
		{"utf8": "", "large_utf8": null, "binary": "", "large_binary": null, "fsb": null, "utf8_nn": ""}]`,
		`[{"utf8": "last", "large_utf8": "", "binary": null, "large_binary": "AQI=", "fsb": "MTIz", "utf8_nn": "end"}]`, 2, 3)
}

func viewCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("utf8_view", arrow.BinaryTypes.StringView), field("binary_view", arrow.BinaryTypes.BinaryView),
	}, nil)
	return jsonCase(mem, "views", sc, `[
		{"utf8_view": null, "binary_view": null},
		{"utf8_view": "", "binary_view": ""},
		{"utf8_view": "short", "binary_view": "AAECAw=="},
		{"utf8_view": "a string of more than twelve bytes, out of line", "binary_view": "AAECAwQFBgcICQoLDA0ODxAREhM="},
		{"utf8_view": "twelve bytes", "binary_view": "AAECAwQFBgcICQoL"},
		{"utf8_view": "ünïcödé out of line as well", "binary_view": null}]`,
		`[{"utf8_view": "again, a long value of the second batch", "binary_view": "/w=="}]`, 2, 4)
}

func listCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("list", arrow.ListOf(arrow.PrimitiveTypes.Int32)),
		field("large_list", arrow.LargeListOf(arrow.BinaryTypes.String)),
		field("fsl", arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Float32)),
		field("list_list", arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Int8))),
		field("fsl_empty_items", arrow.FixedSizeListOf(2, arrow.BinaryTypes.String)),
	}, nil)
	return jsonCase(mem, "lists", sc, `[
		{"list": null, "large_list": null, "fsl": null, "list_list": null, "fsl_empty_items": null},
		{"list": [], "large_list": [], "fsl": [1, null, 3], "list_list": [], "fsl_empty_items": ["", null]},
		{"list": [1, null, 3], "large_list": ["a", "", null], "fsl": [null, null, null], "list_list": [[], null, [1, 2]], "fsl_empty_items": ["x", "y"]},
		{"list": [null], "large_list": [""], "fsl": [4, 5, 6], "list_list": [null], "fsl_empty_items": [null, null]},
		{"list": [7], "large_list": null, "fsl": null, "list_list": [[3]], "fsl_empty_items": null}]`,
		`[{"list": [8, 9], "large_list": ["z"], "fsl": [7, 8, 9], "list_list": [[4], []], "fsl_empty_items": ["", ""]}]`, 2, 3)
}

func listViewCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("list_view", arrow.ListViewOf(arrow.PrimitiveTypes.Int64)),
		field("large_list_view", arrow.LargeListViewOf(arrow.BinaryTypes.String)),
	}, nil)
	return jsonCase(mem, "list_views", sc, `[
		{"list_view": null, "large_list_view": null},
		{"list_view": [], "large_list_view": []},
		{"list_view": [1, null, 3], "large_list_view": ["a", "", null]},
		{"list_view": [4], "large_list_view": ["bcd"]},
		{"list_view": null, "large_list_view": null}]`,
		`[{"list_view": [5, 6], "large_list_view": ["e"]}]`, 1, 3)
}

func structCase(mem memory.Allocator) Case {
	inner := arrow.StructOf(field("a", arrow.PrimitiveTypes.Int64), field("b", arrow.BinaryTypes.String))
	sc := arrow.NewSchema([]arrow.Field{
		field("s", arrow.StructOf(field("x", arrow.PrimitiveTypes.Int16), field("inner", inner))),
		// Arrow allows empty and repeated field names in a struct.
		field("odd_names", arrow.StructOf(field("", arrow.PrimitiveTypes.Int32), field("dup", arrow.BinaryTypes.String), field("dup", arrow.PrimitiveTypes.Float64))),
		field("", arrow.PrimitiveTypes.Int8),
		field("", arrow.PrimitiveTypes.Int8),
	}, nil)
	// JSON objects cannot name two fields alike: the struct with repeated
	// names is built from its children.
	rec := fromJSON(mem, arrow.NewSchema([]arrow.Field{sc.Field(0), field("c0", arrow.PrimitiveTypes.Int32), field("c1", arrow.BinaryTypes.String), field("c2", arrow.PrimitiveTypes.Float64), field("e0", arrow.PrimitiveTypes.Int8), field("e1", arrow.PrimitiveTypes.Int8)}, nil), `[
		{"s": null, "c0": null, "c1": null, "c2": null, "e0": null, "e1": 1},
		{"s": {"x": 1, "inner": null}, "c0": 1, "c1": "", "c2": 1.5, "e0": 2, "e1": null},
		{"s": {"x": null, "inner": {"a": 2, "b": "two"}}, "c0": 2, "c1": "dup", "c2": null, "e0": 3, "e1": 3},
		{"s": {"x": 3, "inner": {"a": null, "b": null}}, "c0": null, "c1": "x", "c2": -1, "e0": null, "e1": null},
		{"s": null, "c0": 4, "c1": null, "c2": 0, "e0": 5, "e1": 5}]`)
	defer rec.Release()
	n := rec.NumRows()
	// Row 3 of odd_names is null (its children keep values under it).
	valid := memory.NewResizableBuffer(mem)
	valid.Resize(1)
	valid.Bytes()[0] = 0b10111
	defer valid.Release()
	odd := array.NewData(sc.Field(1).Type, int(n), []*memory.Buffer{valid}, []arrow.ArrayData{rec.Column(1).Data(), rec.Column(2).Data(), rec.Column(3).Data()}, 1, 0)
	oddArr := array.MakeFromData(odd)
	odd.Release()
	defer oddArr.Release()
	whole := array.NewRecordBatch(sc, []arrow.Array{rec.Column(0), oddArr, rec.Column(4), rec.Column(5)}, n)
	return Case{Name: "struct", Schema: sc, Batches: split(whole, 1, 3)}
}

func mapCase(mem memory.Allocator) Case {
	sorted := arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32)
	sorted.KeysSorted = true
	sc := arrow.NewSchema([]arrow.Field{
		field("sorted", sorted),
		field("unsorted", arrow.MapOf(arrow.PrimitiveTypes.Int64, arrow.ListOf(arrow.BinaryTypes.String))),
	}, nil)
	return jsonCase(mem, "map", sc, `[
		{"sorted": null, "unsorted": null},
		{"sorted": [], "unsorted": []},
		{"sorted": [{"key": "a", "value": 1}, {"key": "b", "value": null}], "unsorted": [{"key": 9, "value": ["x"]}, {"key": 1, "value": null}, {"key": 5, "value": []}]},
		{"sorted": [{"key": "", "value": 0}], "unsorted": [{"key": -1, "value": ["", null]}]},
		{"sorted": null, "unsorted": []}]`,
		`[{"sorted": [{"key": "z", "value": 26}], "unsorted": null}]`, 2, 3)
}

func unionCase(mem memory.Allocator) Case {
	fields := []arrow.Field{field("i", arrow.PrimitiveTypes.Int32), field("s", arrow.BinaryTypes.String), field("l", arrow.ListOf(arrow.PrimitiveTypes.Int8))}
	codes := []arrow.UnionTypeCode{2, 5, 9} // not 0..n-1: ids are codes, not child indices
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "sparse", Type: arrow.SparseUnionOf(fields, codes)},
		{Name: "dense", Type: arrow.DenseUnionOf(fields, codes)},
	}, nil)
	// A union's JSON value is [type code, value].
	return jsonCase(mem, "union", sc, `[
		{"sparse": [2, null], "dense": [5, null]},
		{"sparse": [2, 7], "dense": [2, 7]},
		{"sparse": [5, ""], "dense": [5, ""]},
		{"sparse": [9, [1, null]], "dense": [9, [1, null]]},
		{"sparse": [5, "text"], "dense": [2, -1]},
		{"sparse": [9, []], "dense": [9, null]},
		{"sparse": [2, 8], "dense": [5, "last"]}]`,
		`[{"sparse": [5, "b"], "dense": [9, [3]]}, {"sparse": [9, null], "dense": [2, 1]}]`, 2, 5)
}

// dictArray builds a dictionary array of dt with the given dictionary
// values and indices (JSON arrays).
func dictArray(mem memory.Allocator, dt *arrow.DictionaryType, values, indices string) arrow.Array {
	dict, _, err := array.FromJSON(mem, dt.ValueType, strings.NewReader(values))
	if err != nil {
		panic(fmt.Sprintf("arrowcorpus: dictionary %s: %v", dt, err))
	}
	defer dict.Release()
	idx, _, err := array.FromJSON(mem, dt.IndexType, strings.NewReader(indices))
	if err != nil {
		panic(fmt.Sprintf("arrowcorpus: indices %s: %v", dt, err))
	}
	defer idx.Release()
	a, err := array.NewValidatedDictionaryArray(dt, idx, dict)
	if err != nil {
		panic(fmt.Sprintf("arrowcorpus: %s: %v", dt, err))
	}
	return a
}

func batch(sc *arrow.Schema, cols ...arrow.Array) arrow.RecordBatch {
	n := int64(0)
	if len(cols) > 0 {
		n = int64(cols[0].Len())
	}
	rec := array.NewRecordBatch(sc, cols, n)
	for _, c := range cols {
		c.Release()
	}
	return rec
}

var (
	dictI8Str   = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
	dictU8Str   = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Uint8, ValueType: arrow.BinaryTypes.String}
	dictI16I64  = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.PrimitiveTypes.Int64}
	dictU16Bin  = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Uint16, ValueType: arrow.BinaryTypes.Binary}
	dictI32LStr = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.LargeString, Ordered: true}
	dictU32F64  = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Uint32, ValueType: arrow.PrimitiveTypes.Float64}
	dictI64Str  = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int64, ValueType: arrow.BinaryTypes.String}
	dictU64Dec  = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Uint64, ValueType: &arrow.Decimal128Type{Precision: 10, Scale: 2}}
)

// dictCase: every index width, signed and unsigned, with one dictionary
// for every batch (the same values, rebuilt batch by batch).
func dictCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		field("i8_str", dictI8Str), field("u8_str", dictU8Str), field("i16_i64", dictI16I64), field("u16_bin", dictU16Bin),
		field("i32_lstr", dictI32LStr), field("u32_f64", dictU32F64), field("i64_str", dictI64Str), field("u64_dec", dictU64Dec),
	}, nil)
	mk := func(idx string) arrow.RecordBatch {
		return batch(sc,
			dictArray(mem, dictI8Str, `["red", "", "blue"]`, idx),
			dictArray(mem, dictU8Str, `["a", "b", null]`, idx),
			dictArray(mem, dictI16I64, `[-1, 0, 9223372036854775807]`, idx),
			dictArray(mem, dictU16Bin, `["AA==", "", "/w=="]`, idx),
			dictArray(mem, dictI32LStr, `["low", "mid", "high"]`, idx),
			dictArray(mem, dictU32F64, `[0.5, -0.5, 1e300]`, idx),
			dictArray(mem, dictI64Str, `["x", "y", "z"]`, idx),
			dictArray(mem, dictU64Dec, `["1.00", "-2.50", "99999999.99"]`, idx))
	}
	first := mk(`[null, 0, 1, 2, 2, 0, null]`)
	return Case{Name: "dictionary", Schema: sc, Batches: append(split(first, 2, 5), mk(`[1, 1, null, 0]`), mk(`[]`))}
}

// dictDeltaCase: each batch's dictionary extends the one before (what an
// IPC writer sends as delta dictionary batches).
func dictDeltaCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{field("grow", dictI16I64), field("same", dictU8Str)}, nil)
	return Case{Name: "dictionary_delta", Schema: sc, Replaces: true, Batches: []arrow.RecordBatch{
		batch(sc, dictArray(mem, dictI16I64, `[10, 20]`, `[0, 1, null]`), dictArray(mem, dictU8Str, `["p", "q"]`, `[1, 0, 0]`)),
		batch(sc, dictArray(mem, dictI16I64, `[10, 20, 30]`, `[2, 0, 2, 1]`), dictArray(mem, dictU8Str, `["p", "q"]`, `[null, 1, 0, 1]`)),
		batch(sc, dictArray(mem, dictI16I64, `[10, 20, 30, 40, 50]`, `[4, 3]`), dictArray(mem, dictU8Str, `["p", "q"]`, `[0, 0]`)),
	}}
}

// dictChangeCase: the dictionary is replaced between batches (values
// removed and reordered), which only a stream can carry.
func dictChangeCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{field("d", dictI8Str), field("n", arrow.PrimitiveTypes.Int32)}, nil)
	ints := func(js string) arrow.Array {
		a, _, err := array.FromJSON(mem, arrow.PrimitiveTypes.Int32, strings.NewReader(js))
		if err != nil {
			panic(err)
		}
		return a
	}
	first := batch(sc, dictArray(mem, dictI8Str, `["one", "two", "three"]`, `[0, 1, 2, null, 1]`), ints(`[1, 2, 3, 4, 5]`))
	return Case{Name: "dictionary_replaced", Schema: sc, Replaces: true, Batches: append(split(first, 1, 3),
		batch(sc, dictArray(mem, dictI8Str, `["three", "zero"]`, `[1, 0, null]`), ints(`[6, 7, 8]`)),
		batch(sc, dictArray(mem, dictI8Str, `["only"]`, `[0, 0]`), ints(`[9, null]`)),
	)}
}

// dictSharedCase: two columns over one dictionary array.
func dictSharedCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{field("from", dictI32LStr), field("to", dictI32LStr)}, nil)
	mk := func(idxA, idxB string) arrow.RecordBatch {
		dict, _, err := array.FromJSON(mem, arrow.BinaryTypes.LargeString, strings.NewReader(`["ams", "ber", "cdg", ""]`))
		if err != nil {
			panic(err)
		}
		defer dict.Release()
		col := func(idx string) arrow.Array {
			i, _, err := array.FromJSON(mem, arrow.PrimitiveTypes.Int32, strings.NewReader(idx))
			if err != nil {
				panic(err)
			}
			defer i.Release()
			return array.NewDictionaryArray(dictI32LStr, i, dict)
		}
		return batch(sc, col(idxA), col(idxB))
	}
	return Case{Name: "dictionary_shared", Schema: sc, Batches: append(split(mk(`[0, 1, null, 3, 2]`, `[3, 3, 0, null, 1]`), 1, 4), mk(`[2]`, `[0]`))}
}

// dictNestedCase: a dictionary inside a list and inside a struct, and a
// dictionary whose values are lists; the dictionaries change between
// batches.
func dictNestedCase(mem memory.Allocator) Case {
	listOfDict := arrow.ListOf(dictI8Str)
	structOfDict := arrow.StructOf(field("k", dictU16Bin), field("v", arrow.PrimitiveTypes.Int32))
	dictOfList := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.ListOf(arrow.BinaryTypes.String)}
	sc := arrow.NewSchema([]arrow.Field{field("list_of_dict", listOfDict), field("struct_of_dict", structOfDict), field("dict_of_list", dictOfList)}, nil)
	// mk: a list column of offsets (nil validity unless nulls), over a
	// dictionary of words; a struct column and a dictionary-of-lists
	// column of as many rows.
	mk := func(words, idx string, offsets []int32, listValid []byte, listNulls int, keys, vals, listIdx string) arrow.RecordBatch {
		n := len(offsets) - 1
		inner := dictArray(mem, dictI8Str, words, idx)
		defer inner.Release()
		offBuf := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offsets))
		var validBuf *memory.Buffer
		if listValid != nil {
			validBuf = memory.NewBufferBytes(listValid)
		}
		ld := array.NewData(listOfDict, n, []*memory.Buffer{validBuf, offBuf}, []arrow.ArrayData{inner.Data()}, listNulls, 0)
		list := array.MakeFromData(ld)
		ld.Release()

		k := dictArray(mem, dictU16Bin, `["a2V5MQ==", "a2V5Mg==", ""]`, keys)
		defer k.Release()
		v, _, err := array.FromJSON(mem, arrow.PrimitiveTypes.Int32, strings.NewReader(vals))
		if err != nil {
			panic(err)
		}
		defer v.Release()
		sd := array.NewData(structOfDict, n, []*memory.Buffer{nil}, []arrow.ArrayData{k.Data(), v.Data()}, 0, 0)
		st := array.MakeFromData(sd)
		sd.Release()

		dl := dictArray(mem, dictOfList, `[["a", "b"], [], null, [""]]`, listIdx)
		return batch(sc, list, st, dl)
	}
	first := mk(`["x", "y", ""]`, `[0, 1, 2, null, 1, 0]`, []int32{0, 0, 2, 2, 5, 6}, []byte{0b11110}, 1,
		`[1, 0, 2, null, 1]`, `[5, null, 7, 8, 9]`, `[null, 3, 1, 0, 2]`)
	second := mk(`["other"]`, `[0, 0]`, []int32{0, 1, 2}, nil, 0, `[2, 2]`, `[1, 2]`, `[0, 0]`)
	return Case{Name: "dictionary_nested", Schema: sc, Replaces: true, Batches: append(split(first, 1, 3), second)}
}

func reeCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "ree_i16_str", Type: arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int16, arrow.BinaryTypes.String)},
		{Name: "ree_i32_f64", Type: arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Float64)},
		{Name: "ree_i64_list", Type: arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int64, arrow.ListOf(arrow.PrimitiveTypes.Int32))},
	}, nil)
	return jsonCase(mem, "run_end_encoded", sc, `[
		{"ree_i16_str": null, "ree_i32_f64": 1.5, "ree_i64_list": null},
		{"ree_i16_str": null, "ree_i32_f64": 1.5, "ree_i64_list": [1]},
		{"ree_i16_str": "a", "ree_i32_f64": 1.5, "ree_i64_list": [1]},
		{"ree_i16_str": "a", "ree_i32_f64": null, "ree_i64_list": []},
		{"ree_i16_str": "a", "ree_i32_f64": null, "ree_i64_list": []},
		{"ree_i16_str": "", "ree_i32_f64": 2, "ree_i64_list": [2, null]},
		{"ree_i16_str": "b", "ree_i32_f64": 2, "ree_i64_list": null}]`,
		`[{"ree_i16_str": "z", "ree_i32_f64": 3, "ree_i64_list": [3]}, {"ree_i16_str": "z", "ree_i32_f64": 3, "ree_i64_list": [3]}]`, 2, 4)
}

// extensionCase: arrow-go's canonical extension types (UUID, JSON, Bool8)
// and an opaque type, whose metadata is its name and vendor.
func extensionCase(mem memory.Allocator) Case {
	jsonType, err := extensions.NewJSONType(arrow.BinaryTypes.String)
	if err != nil {
		panic(err)
	}
	opaque := extensions.NewOpaqueType(arrow.BinaryTypes.Binary, "geometry", "durashuffle test vendor")
	md := arrow.NewMetadata([]string{"comment"}, []string{"field metadata next to an extension type"})
	sc := arrow.NewSchema([]arrow.Field{
		field("uuid", extensions.NewUUIDType()),
		{Name: "json", Type: jsonType, Nullable: true, Metadata: md},
		field("bool8", extensions.NewBool8Type()),
		field("opaque", opaque),
		field("list_of_uuid", arrow.ListOf(extensions.NewUUIDType())),
	}, nil)
	storage := arrow.NewSchema([]arrow.Field{
		field("uuid", &arrow.FixedSizeBinaryType{ByteWidth: 16}), field("json", arrow.BinaryTypes.String),
		field("bool8", arrow.PrimitiveTypes.Int8), field("opaque", arrow.BinaryTypes.Binary),
		field("list_of_uuid", arrow.ListOf(&arrow.FixedSizeBinaryType{ByteWidth: 16})),
	}, nil)
	toExt := func(rec arrow.RecordBatch) arrow.RecordBatch {
		defer rec.Release()
		cols := make([]arrow.Array, rec.NumCols())
		for i, c := range rec.Columns() {
			switch dt := sc.Field(i).Type.(type) {
			case arrow.ExtensionType:
				cols[i] = array.NewExtensionArrayWithStorage(dt, c)
			default: // the list of UUIDs: its child becomes the extension array
				child := array.NewExtensionArrayWithStorage(extensions.NewUUIDType(), c.(*array.List).ListValues())
				d := array.NewData(dt, c.Len(), c.Data().Buffers(), []arrow.ArrayData{child.Data()}, c.NullN(), c.Data().Offset())
				cols[i] = array.MakeFromData(d)
				d.Release()
				child.Release()
			}
		}
		return batch(sc, cols...)
	}
	first := toExt(fromJSON(mem, storage, `[
		{"uuid": null, "json": null, "bool8": null, "opaque": null, "list_of_uuid": null},
		{"uuid": "AAECAwQFBgcICQoLDA0ODw==", "json": "{\"a\": [1, 2]}", "bool8": 1, "opaque": "AQID", "list_of_uuid": []},
		{"uuid": "/////////////////////w==", "json": "null", "bool8": 0, "opaque": "", "list_of_uuid": ["EBESExQVFhcYGRobHB0eHw==", null]},
		{"uuid": "EBESExQVFhcYGRobHB0eHw==", "json": "\"\"", "bool8": -3, "opaque": "/w==", "list_of_uuid": null}]`))
	second := toExt(fromJSON(mem, storage, `[{"uuid": "AAAAAAAAAAAAAAAAAAAAAA==", "json": "[]", "bool8": null, "opaque": null, "list_of_uuid": ["AAAAAAAAAAAAAAAAAAAAAA=="]}]`))
	return Case{Name: "extension", Schema: sc, Batches: append(split(first, 1, 2), second)}
}

// metadataCase: schema-level and field-level metadata, at the top and
// on nested fields.
func metadataCase(mem memory.Allocator) Case {
	schemaMD := arrow.NewMetadata([]string{"origin", "spark.sql", "pandas"}, []string{"arrowcorpus", `{"type":"struct"}`, ""})
	fmd := arrow.NewMetadata([]string{"unit", "empty", "ünicode"}, []string{"m/s", "", "välue"})
	child := arrow.Field{Name: "c", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Metadata: arrow.NewMetadata([]string{"child"}, []string{"yes"})}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "speed", Type: arrow.PrimitiveTypes.Float64, Nullable: true, Metadata: fmd},
		{Name: "nested", Type: arrow.StructOf(child), Nullable: true},
		{Name: "items", Type: arrow.ListOfField(arrow.Field{Name: "item", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: arrow.NewMetadata([]string{"k"}, []string{"v"})}), Nullable: true},
	}, &schemaMD)
	return jsonCase(mem, "metadata", sc, `[
		{"speed": 1.5, "nested": {"c": 1}, "items": ["a"]},
		{"speed": null, "nested": null, "items": null},
		{"speed": 3, "nested": {"c": null}, "items": []}]`, "", 1, 2)
}

// zeroRowsCase: zero-row batches before, between and after rows.
func zeroRowsCase(mem memory.Allocator) Case {
	sc := arrow.NewSchema([]arrow.Field{field("s", arrow.BinaryTypes.String), field("l", arrow.ListOf(arrow.PrimitiveTypes.Int64))}, nil)
	empty := func() arrow.RecordBatch { return fromJSON(mem, sc, `[]`) }
	rows := fromJSON(mem, sc, `[{"s": "a", "l": [1]}, {"s": null, "l": []}, {"s": "", "l": null}]`)
	defer rows.Release()
	return Case{Name: "zero_rows", Schema: sc, Batches: []arrow.RecordBatch{
		empty(), rows.NewSlice(0, 2), empty(), rows.NewSlice(2, 2), rows.NewSlice(2, 3), empty(),
	}}
}

// noBatchesCase: a schema and no batch at all.
func noBatchesCase(mem memory.Allocator) Case {
	md := arrow.NewMetadata([]string{"empty"}, []string{"true"})
	sc := arrow.NewSchema([]arrow.Field{field("k", arrow.PrimitiveTypes.Int64), field("v", arrow.BinaryTypes.String)}, &md)
	return Case{Name: "no_batches", Schema: sc}
}

// Has says whether dt is, or holds at any depth, a type of ids.
func Has(dt arrow.DataType, ids ...arrow.Type) bool { return arrowcheck.Has(dt, ids...) }
