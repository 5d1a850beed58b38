package partition

import (
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/testkit/columns"
)

// The test kit's column builders, by their short names.
var (
	fromJSON     = columns.FromJSON
	jsonList     = columns.JSONList
	dictOf       = columns.DictOf
	reeOf        = columns.REEOf
	base64Of     = columns.Base64Of
	carryColumns = columns.CarryColumns
)

func keysOf(t testing.TB, col arrow.Array) []uint64 {
	t.Helper()
	keys := make([]uint64, col.Len())
	if err := columnKeys(col, keys); err != nil {
		t.Fatalf("%s: %v", col.DataType(), err)
	}
	return keys
}

// encoding is one physical type of a family's values; lit turns the
// family's literal into this type's JSON (nil: the literal as is).
type encoding struct {
	dt  arrow.DataType
	lit func(string) string
}

func quoted(s string) string {
	if s == "null" {
		return s
	}
	return strconv.Quote(s)
}

func scaled(m int64) func(string) string {
	return func(s string) string {
		if s == "null" {
			return s
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			panic(err)
		}
		return strconv.FormatInt(v*m, 10)
	}
}

// uuidBytes turns a quoted UUID into base64 of its 16 bytes.
func uuidBytes(s string) string {
	if s == "null" {
		return s
	}
	u, _ := strconv.Unquote(s)
	raw := make([]byte, 0, 16)
	for i := 0; i < len(u); {
		if u[i] == '-' {
			i++
			continue
		}
		b, err := strconv.ParseUint(u[i:i+2], 16, 8)
		if err != nil {
			panic(err)
		}
		raw = append(raw, byte(b))
		i += 2
	}
	return strconv.Quote(base64.StdEncoding.EncodeToString(raw))
}

func decimalLit(s string) string { return quoted(s) }

// keyFamilies: the same logical values written as every type that must
// partition them alike. lits are the values in the family's JSON form.
var keyFamilies = []struct {
	name string
	lits []string
	encs []encoding
}{
	{"small integers", []string{"5", "0", "127", "null", "42", "5", "5", "1", "0"}, []encoding{
		{arrow.PrimitiveTypes.Int8, nil}, {arrow.PrimitiveTypes.Int16, nil}, {arrow.PrimitiveTypes.Int32, nil}, {arrow.PrimitiveTypes.Int64, nil},
		{arrow.PrimitiveTypes.Uint8, nil}, {arrow.PrimitiveTypes.Uint16, nil}, {arrow.PrimitiveTypes.Uint32, nil}, {arrow.PrimitiveTypes.Uint64, nil},
		{arrow.FixedWidthTypes.Float16, nil}, {arrow.PrimitiveTypes.Float32, nil}, {arrow.PrimitiveTypes.Float64, nil},
		{&arrow.Decimal32Type{Precision: 9, Scale: 0}, decimalLit}, {&arrow.Decimal64Type{Precision: 18, Scale: 3}, decimalLit},
		{&arrow.Decimal128Type{Precision: 38, Scale: 2}, decimalLit}, {&arrow.Decimal256Type{Precision: 76, Scale: 20}, decimalLit},
	}},
	{"negative integers", []string{"-1", "-128", "null", "-5", "-1"}, []encoding{
		{arrow.PrimitiveTypes.Int8, nil}, {arrow.PrimitiveTypes.Int16, nil}, {arrow.PrimitiveTypes.Int32, nil}, {arrow.PrimitiveTypes.Int64, nil},
		{arrow.PrimitiveTypes.Float32, nil}, {arrow.PrimitiveTypes.Float64, nil},
		{&arrow.Decimal32Type{Precision: 9, Scale: 1}, decimalLit}, {&arrow.Decimal128Type{Precision: 38, Scale: 0}, decimalLit},
		{&arrow.Decimal256Type{Precision: 40, Scale: 4}, decimalLit},
	}},
	{"fractions", []string{"0.5", "-2.25", "null", "0.5", "3", "-0", "-1.375"}, []encoding{
		{arrow.FixedWidthTypes.Float16, nil}, {arrow.PrimitiveTypes.Float32, nil}, {arrow.PrimitiveTypes.Float64, nil},
		{&arrow.Decimal32Type{Precision: 9, Scale: 3}, decimalLit}, {&arrow.Decimal64Type{Precision: 18, Scale: 4}, decimalLit},
		{&arrow.Decimal128Type{Precision: 38, Scale: 3}, decimalLit}, {&arrow.Decimal256Type{Precision: 76, Scale: 30}, decimalLit},
	}},
	{"2^63 and 2^64", []string{"9223372036854775808", "null", "18446744073709551616", "9223372036854775808"}, []encoding{
		{arrow.PrimitiveTypes.Float32, nil}, {arrow.PrimitiveTypes.Float64, nil},
		{&arrow.Decimal128Type{Precision: 38, Scale: 5}, decimalLit}, {&arrow.Decimal256Type{Precision: 76, Scale: 0}, decimalLit},
	}},
	{"large unsigned", []string{"12345678901234567890", "9223372036854775808", "null", "18446744073709551615"}, []encoding{
		{arrow.PrimitiveTypes.Uint64, nil},
		{&arrow.Decimal128Type{Precision: 38, Scale: 0}, decimalLit}, {&arrow.Decimal256Type{Precision: 76, Scale: 3}, decimalLit},
	}},
	{"strings", []string{`"a"`, `""`, `"ünïcode"`, "null", `"a long string past twelve bytes"`, `"a"`, `"a"`}, []encoding{
		{arrow.BinaryTypes.String, nil}, {arrow.BinaryTypes.LargeString, nil}, {arrow.BinaryTypes.StringView, nil},
		{arrow.BinaryTypes.Binary, base64Of}, {arrow.BinaryTypes.LargeBinary, base64Of}, {arrow.BinaryTypes.BinaryView, base64Of},
	}},
	{"UUIDs", []string{`"0190d9b4-7c3a-7f4e-9a55-3c2b1a0f9e88"`, "null", `"00000000-0000-0000-0000-000000000000"`, `"0190d9b4-7c3a-7f4e-9a55-3c2b1a0f9e88"`}, []encoding{
		{extensions.NewUUIDType(), nil}, {&arrow.FixedSizeBinaryType{ByteWidth: 16}, uuidBytes},
		{arrow.BinaryTypes.Binary, uuidBytes}, {arrow.BinaryTypes.BinaryView, uuidBytes},
	}},
	{"timestamps (seconds)", []string{"0", "1700000000", "-1", "null", "1700000000", "253402300799"}, []encoding{
		{&arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}, nil},
		{&arrow.TimestampType{Unit: arrow.Millisecond}, scaled(1e3)},
		{&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "America/New_York"}, scaled(1e6)},
		{&arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "+01:00"}, func(s string) string {
			if s == "253402300799" { // past int64 nanoseconds: only the other units hold it
				return "null"
			}
			return scaled(1e9)(s)
		}},
	}},
	{"dates (days)", []string{"0", "19723", "-1", "null", "19723"}, []encoding{
		{arrow.FixedWidthTypes.Date32, nil}, {arrow.FixedWidthTypes.Date64, scaled(86400000)},
	}},
	{"times of day (seconds)", []string{"0", "3600", "86399", "null", "3600"}, []encoding{
		{arrow.FixedWidthTypes.Time32s, nil}, {arrow.FixedWidthTypes.Time32ms, scaled(1e3)},
		{arrow.FixedWidthTypes.Time64us, scaled(1e6)}, {arrow.FixedWidthTypes.Time64ns, scaled(1e9)},
	}},
	{"durations (seconds)", []string{"0", "-5", "86400", "null", "-5"}, []encoding{
		{arrow.FixedWidthTypes.Duration_s, nil}, {arrow.FixedWidthTypes.Duration_ms, scaled(1e3)},
		{arrow.FixedWidthTypes.Duration_us, scaled(1e6)}, {arrow.FixedWidthTypes.Duration_ns, scaled(1e9)},
	}},
	{"month intervals", []string{"0", "12", "-1", "null", "12"}, []encoding{
		{arrow.FixedWidthTypes.MonthInterval, func(s string) string {
			if s == "null" {
				return s
			}
			return `{"months":` + s + `}`
		}},
		{arrow.FixedWidthTypes.MonthDayNanoInterval, func(s string) string {
			if s == "null" {
				return s
			}
			return `{"months":` + s + `,"days":0,"nanoseconds":0}`
		}},
	}},
	{"day-time intervals (days ms)", []string{"1 2", "0 0", "null", "-3 500", "1 2"}, []encoding{
		{arrow.FixedWidthTypes.DayTimeInterval, func(s string) string {
			if s == "null" {
				return s
			}
			f := strings.Fields(s)
			return `{"days":` + f[0] + `,"milliseconds":` + f[1] + `}`
		}},
		{arrow.FixedWidthTypes.MonthDayNanoInterval, func(s string) string {
			if s == "null" {
				return s
			}
			f := strings.Fields(s)
			return `{"months":0,"days":` + f[0] + `,"nanoseconds":` + scaled(1e6)(f[1]) + `}`
		}},
	}},
	{"booleans", []string{"true", "false", "null", "true", "true"}, []encoding{
		{arrow.FixedWidthTypes.Boolean, nil},
	}},
}

// TestPartitionKeyEncodings: every physical type of the same logical
// values gives the same keys, so the same partitions, plain, as a
// dictionary, run-end encoded and sliced; nulls are key 0; distinct values
// have distinct keys.
func TestPartitionKeyEncodings(t *testing.T) {
	for _, fam := range keyFamilies {
		t.Run(fam.name, func(t *testing.T) {
			var want []uint64
			var wantFrom string
			for _, enc := range fam.encs {
				lits := make([]string, len(fam.lits))
				for i, l := range fam.lits {
					lits[i] = l
					if enc.lit != nil {
						lits[i] = enc.lit(l)
					}
				}
				plain := fromJSON(t, enc.dt, jsonList(lits))
				cols := map[string]arrow.Array{"plain": plain, "run-end encoded": reeOf(t, enc.dt, lits)}
				if _, ext := enc.dt.(arrow.ExtensionType); !ext {
					cols["dictionary"] = dictOf(t, enc.dt, lits)
				}
				for form, col := range cols {
					// The type is taken before any batch.
					if err := CheckKeyType(col.DataType()); err != nil {
						t.Fatalf("%s %s: %v", form, col.DataType(), err)
					}
					got := keysOf(t, col)
					name := fmt.Sprintf("%s %s", form, col.DataType())
					if want == nil {
						want, wantFrom = got, name
						zero := func(l string) bool { return l == "0" || l == "-0" }
						for i, l := range fam.lits {
							if l == "null" && got[i] != 0 {
								t.Fatalf("%s: row %d is null with key %#x, want 0", name, i, got[i])
							}
							for j := range i {
								if fam.lits[j] != l && got[j] == got[i] && !(zero(l) && zero(fam.lits[j])) && l != "null" && fam.lits[j] != "null" {
									t.Errorf("%s: %s and %s both have key %#x", name, fam.lits[j], l, got[i])
								}
							}
						}
					}
					for i := range got {
						if !plain.IsValid(i) && fam.lits[i] != "null" {
							continue // a value this type cannot hold
						}
						if got[i] != want[i] {
							t.Errorf("%s: row %d (%s) has key %#x, %s has %#x", name, i, fam.lits[i], got[i], wantFrom, want[i])
						}
						for _, p := range []int{4, 2048} {
							if a, b := partitionOf(got[i], p), partitionOf(want[i], p); a != b {
								t.Errorf("%s: row %d in partition %d of %d, %s's in %d", name, i, a, p, wantFrom, b)
							}
						}
					}
					// A slice of the column has its rows' keys.
					if col.Len() > 2 {
						s := array.NewSlice(col, 1, int64(col.Len()-1))
						if got := keysOf(t, s); !slices.Equal(got, keysOf(t, col)[1:col.Len()-1]) {
							t.Errorf("%s sliced [1:%d]: keys %x, want %x", name, col.Len()-1, got, keysOf(t, col)[1:col.Len()-1])
						}
						s.Release()
					}
				}
			}
		})
	}
}

// TestPartitionFloatCanon: -0.0 is 0, every NaN (any payload, float32 or
// float64) is one NaN, infinities are themselves.
func TestPartitionFloatCanon(t *testing.T) {
	b64 := array.NewFloat64Builder(memory.DefaultAllocator)
	defer b64.Release()
	b64.AppendValues([]float64{math.Copysign(0, -1), 0, math.NaN(), math.Float64frombits(0x7FF0000000000BAD), math.Float64frombits(0xFFF8000000000001), math.Inf(1), math.Inf(-1)}, nil)
	f64 := b64.NewArray()
	defer f64.Release()
	b32 := array.NewFloat32Builder(memory.DefaultAllocator)
	defer b32.Release()
	b32.AppendValues([]float32{float32(math.Copysign(0, -1)), 0, float32(math.NaN()), math.Float32frombits(0x7FC00123), math.Float32frombits(0xFFC00000), float32(math.Inf(1)), float32(math.Inf(-1))}, nil)
	f32 := b32.NewArray()
	defer f32.Release()
	b16 := array.NewFloat16Builder(memory.DefaultAllocator)
	defer b16.Release()
	b16.AppendValues([]float16.Num{float16.New(float32(math.Copysign(0, -1))), float16.New(0), float16.NaN(), float16.FromBits(0x7E01), float16.FromBits(0xFE00), float16.Inf(), float16.Inf().Negate()}, nil)
	f16 := b16.NewArray()
	defer f16.Release()
	for _, col := range []arrow.Array{f64, f32, f16} {
		k := keysOf(t, col)
		if k[0] != 0 || k[1] != 0 {
			t.Errorf("%s: -0.0 and 0.0 have keys %#x and %#x, want 0", col.DataType(), k[0], k[1])
		}
		if k[2] != keyNaN || k[3] != keyNaN || k[4] != keyNaN {
			t.Errorf("%s: NaNs have keys %#x %#x %#x, want %#x", col.DataType(), k[2], k[3], k[4], keyNaN)
		}
		if k[5] != keyPosInf || k[6] != keyNegInf || k[5] == k[6] || k[5] == keyNaN {
			t.Errorf("%s: +Inf %#x, -Inf %#x", col.DataType(), k[5], k[6])
		}
	}
}

// TestFNV: the inlined FNV-1a 64 is hash/fnv's.
func TestFNV(t *testing.T) {
	for _, s := range []string{"", "a", "durashuffle", "\x00\xff\x10", strings.Repeat("xyz", 100)} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := fnvString(fnvOffset, s), h.Sum64(); got != want {
			t.Errorf("fnvString(%q) = %#x, hash/fnv %#x", s, got, want)
		}
		if got, want := fnvBytes(fnvOffset, []byte(s)), h.Sum64(); got != want {
			t.Errorf("fnvBytes(%q) = %#x, hash/fnv %#x", s, got, want)
		}
	}
	h := fnv.New64a()
	h.Write([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	if got := fnvUint64(fnvOffset, 0x0102030405060708); got != h.Sum64() {
		t.Errorf("fnvUint64 = %#x, hash/fnv of its big-endian bytes %#x", got, h.Sum64())
	}
}

// mix64Ref is SplitMix64's finalizer as docs/partitioning.md states it.
func mix64Ref(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// partitionVectors are docs/partitioning.md's test vectors: a change of
// the algorithm fails TestPartitionVectors, and must change the table.
var partitionVectors = []struct {
	dt        arrow.DataType
	json      string
	key, hash uint64
	p4, p2048 int
}{
	{arrow.PrimitiveTypes.Int64, `null`, 0x0000000000000000, 0xf2ee2134306ff565, 1, 1381},
	{arrow.PrimitiveTypes.Int64, `0`, 0x0000000000000000, 0xf2ee2134306ff565, 1, 1381},
	{arrow.PrimitiveTypes.Int64, `1`, 0x0000000000000001, 0x803be1dfac842450, 0, 1104},
	{arrow.PrimitiveTypes.Int64, `-1`, 0xffffffffffffffff, 0xd9e50edbeb02ec3a, 2, 1082},
	{arrow.PrimitiveTypes.Int64, `1234567`, 0x000000000012d687, 0x57b9f2e1f7dbbeff, 3, 1791},
	{arrow.PrimitiveTypes.Int32, `5`, 0x0000000000000005, 0x1ceb28c67aafad7c, 0, 1404},
	{arrow.PrimitiveTypes.Float64, `5`, 0x0000000000000005, 0x1ceb28c67aafad7c, 0, 1404},
	{&arrow.Decimal128Type{Precision: 10, Scale: 2}, `"5.00"`, 0x0000000000000005, 0x1ceb28c67aafad7c, 0, 1404},
	{arrow.PrimitiveTypes.Uint64, `9223372036854775808`, 0x6d2a95f72ab33cd3, 0x713134960ffd500f, 3, 15},
	{arrow.PrimitiveTypes.Uint64, `18446744073709551615`, 0x2524114918031caf, 0xfff3d8d2fe68aee7, 3, 1767},
	{arrow.PrimitiveTypes.Float64, `0.5`, 0x844c994873f874d2, 0x5d623e335af4014c, 0, 332},
	{&arrow.Decimal32Type{Precision: 5, Scale: 2}, `"0.50"`, 0x844c994873f874d2, 0x5d623e335af4014c, 0, 332},
	{arrow.PrimitiveTypes.Float64, `-2.25`, 0x8b81cabf30d5f1d6, 0x267fa66bd97f1f6a, 2, 1898},
	{&arrow.Decimal64Type{Precision: 18, Scale: 2}, `"0.10"`, 0xb2f7ceeb479e014a, 0x6e5affa77c31bc90, 0, 1168},
	{&arrow.Decimal256Type{Precision: 40, Scale: 0}, `"100000000000000000000"`, 0x093255f3f784c7da, 0xded5f22e36d34811, 1, 17},
	{arrow.PrimitiveTypes.Float64, `"NaN"`, 0xaf63b94c8601b113, 0x46e3c83840096add, 1, 733},
	{arrow.PrimitiveTypes.Float64, `"+Inf"`, 0xaf63bf4c8601bb45, 0x33cc67a459ec4a1e, 2, 542},
	{arrow.PrimitiveTypes.Float64, `"-Inf"`, 0xaf63be4c8601b992, 0xc3a3abe390451c35, 1, 1077},
	{arrow.FixedWidthTypes.Boolean, `false`, 0x08218a07b4dd0020, 0xbceedda7b7285071, 1, 113},
	{arrow.FixedWidthTypes.Boolean, `true`, 0x08218b07b4dd01d3, 0x9864db818d9365c0, 0, 1472},
	{arrow.BinaryTypes.String, `""`, 0xaf63bb4c8601b479, 0x3a134bf47ab52c80, 0, 1152},
	{arrow.BinaryTypes.String, `"a"`, 0x082b5b07b4e504c8, 0x446bcd956ad3d404, 0, 1028},
	{arrow.BinaryTypes.StringView, `"durashuffle"`, 0xe5cae2dc7a3649b8, 0xa022d6c880c857dd, 1, 2013},
	{arrow.BinaryTypes.Binary, `"AP8="`, 0xc7f9e518623ed4ec, 0x30a936e30c3978c1, 1, 193},
	{&arrow.FixedSizeBinaryType{ByteWidth: 16}, `"AZDZtHw6f06aVTwrGg+eiA=="`, 0x5c33d7cee1526383, 0x811b007656e93d3d, 1, 1341},
	{arrow.FixedWidthTypes.Date32, `19723`, 0x39a69f213f79d5f8, 0x8a77ef323f9bda7e, 2, 638},
	{&arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}, `1700000000`, 0xd3701d422ec8ceb4, 0xceadbb6d9a9cce2b, 3, 1579},
	{&arrow.TimestampType{Unit: arrow.Nanosecond}, `1700000000000000000`, 0xd3701d422ec8ceb4, 0xceadbb6d9a9cce2b, 3, 1579},
	{&arrow.TimestampType{Unit: arrow.Millisecond}, `-1000`, 0xaf208b65d3b196fd, 0x1dec6756f1fc46a4, 0, 1700},
	{arrow.FixedWidthTypes.Time64us, `43200000000`, 0x623bfeb7f3746fdf, 0x6e66b63e858a4453, 3, 1107},
	{arrow.FixedWidthTypes.Duration_ms, `1500`, 0x3e2d58d6e1bce4cb, 0xe530794c9031f96a, 2, 362},
	{arrow.FixedWidthTypes.MonthInterval, `{"months":1}`, 0xa37d0b35f1fbd66d, 0xd89debcae5cf5f7a, 2, 1914},
	{arrow.FixedWidthTypes.DayTimeInterval, `{"days":1,"milliseconds":0}`, 0xa6f606193a2c77bd, 0x1aac181377c0bf5d, 1, 1885},
	{arrow.FixedWidthTypes.MonthDayNanoInterval, `{"months":1,"days":2,"nanoseconds":3}`, 0x7ca8617ac8c5ebfa, 0x6ae45bf8acdc97ba, 2, 1978},
}

func TestPartitionVectors(t *testing.T) {
	if len(partitionVectors) < 20 {
		t.Fatalf("%d vectors", len(partitionVectors))
	}
	for _, v := range partitionVectors {
		col := fromJSON(t, v.dt, "["+v.json+"]")
		k := keysOf(t, col)[0]
		h := mix64Ref(k ^ 0x5851F42D4C957F2D)
		if k != v.key || h != v.hash || partitionOf(k, 4) != v.p4 || partitionOf(k, 2048) != v.p2048 ||
			int(h%4) != v.p4 || int(h%2048) != v.p2048 {
			t.Errorf("%s %s: key %#016x hash %#016x partitions %d/4 %d/2048, want key %#016x hash %#016x partitions %d/4 %d/2048",
				v.dt, v.json, k, h, partitionOf(k, 4), partitionOf(k, 2048), v.key, v.hash, v.p4, v.p2048)
		}
	}
}

// TestPartitionRefused: nested and null-type keys are refused with an
// error naming the column and its type.
func TestPartitionRefused(t *testing.T) {
	su := arrow.SparseUnionOf([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}, []arrow.UnionTypeCode{0})
	du := arrow.DenseUnionOf([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}, []arrow.UnionTypeCode{0})
	cases := []struct {
		dt   arrow.DataType
		json string
		want string
	}{
		{arrow.ListOf(arrow.PrimitiveTypes.Int32), `[[1],[2]]`, "list<item: int32, nullable>"},
		{arrow.LargeListOf(arrow.PrimitiveTypes.Int32), `[[1],[2]]`, "large_list<item: int32, nullable>"},
		{arrow.FixedSizeListOf(1, arrow.PrimitiveTypes.Int32), `[[1],[2]]`, "fixed_size_list<item: int32, nullable>[1]"},
		{arrow.ListViewOf(arrow.PrimitiveTypes.Int32), `[[1],[2]]`, "list_view<item: int32, nullable>"},
		{arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32}), `[{"a":1},{"a":2}]`, "struct<a: int32>"},
		{arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32), `[[{"key":"a","value":1}],[]]`, "map<utf8, int32, items_nullable>"},
		{su, `[[0,1],[0,2]]`, "sparse_union<i: type=int32, nullable=0>"},
		{du, `[[0,1],[0,2]]`, "dense_union<i: type=int32, nullable=0>"},
		{arrow.Null, `[null,null]`, "null"},
		{arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32})), `[{"a":1},{"a":2}]`,
			"run_end_encoded<run_ends: int32, values: struct<a: int32>> (values of type struct<a: int32> have no partitioning key): nested and null types"},
	}
	for _, c := range cases {
		col := fromJSON(t, c.dt, c.json)
		id := fromJSON(t, arrow.PrimitiveTypes.Int64, `[1,2]`)
		schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "the key", Type: c.dt, Nullable: true}}, nil)
		rec := array.NewRecordBatch(schema, []arrow.Array{id, col}, 2)
		// Refused before any batch is read, and by the batch's column.
		err := CheckKeyType(schema.Field(1).Type)
		want := "cannot partition by a column of type " + c.want
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", c.dt, err, want)
		}
		_, err = Assign(rec.Column(1), 4, nil)
		rec.Release()
		if want := "cannot partition by a column of type " + c.want; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", c.dt, err, want)
		}
	}
}

func mapLits(lits []string, f func(string) string) []string {
	out := make([]string, len(lits))
	for i, l := range lits {
		out[i] = f(l)
	}
	return out
}

// TestPartitionIntegersAsOfInt64: an integer key lands where OfInt64
// puts it (the partition of the demo's l_orderkey), whatever its
// integer, float or decimal type.
func TestPartitionIntegersAsOfInt64(t *testing.T) {
	var lits []string
	var want []int64
	for i := int64(0); i < 4000; i += 7 {
		k := i*i*7919 + i
		lits = append(lits, strconv.FormatInt(k, 10))
		want = append(want, k)
	}
	lits = append(lits, "-5", "0")
	want = append(want, -5, 0)
	for _, enc := range []encoding{
		{arrow.PrimitiveTypes.Int64, nil}, {arrow.PrimitiveTypes.Float64, nil},
		{&arrow.Decimal128Type{Precision: 20, Scale: 2}, decimalLit}, {&arrow.Decimal64Type{Precision: 18, Scale: 0}, decimalLit},
	} {
		l := lits
		if enc.lit != nil {
			l = mapLits(lits, enc.lit)
		}
		col := fromJSON(t, enc.dt, jsonList(l))
		for _, p := range []int{1, 4, 16, 2048} {
			got, err := Assign(col, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if w := OfInt64(want[i], p); int(got[i]) != w {
					t.Fatalf("%s %s: partition %d of %d, OfInt64's %d", enc.dt, l[i], got[i], p, w)
				}
			}
		}
	}
}

// TestPartitionDecimalNegativeScale: a decimal of negative scale is its
// value too: unscaled 5 at scale -2 is 500.
func TestPartitionDecimalNegativeScale(t *testing.T) {
	b := array.NewDecimal128Builder(memory.DefaultAllocator, &arrow.Decimal128Type{Precision: 5, Scale: -2})
	defer b.Release()
	b.Append(decimal128.FromI64(5))
	b.Append(decimal128.FromI64(-3))
	b.Append(decimal128.FromI64(12345))
	col := b.NewArray()
	defer col.Release()
	want := keysOf(t, fromJSON(t, arrow.PrimitiveTypes.Int64, `[500, -300, 1234500]`))
	if got := keysOf(t, col); !slices.Equal(got, want) {
		t.Fatalf("keys %x, want those of 500, -300, 1234500: %x", got, want)
	}
}
