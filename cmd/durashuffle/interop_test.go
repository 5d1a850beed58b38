package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
)

// TestArrowOutputOpensInJavaScript writes a demo stage, reads a partition
// with `read --format arrow`, and opens the bytes with Apache Arrow's
// JavaScript implementation (testdata/interop-js, installed with npm ci):
// another Arrow implementation must see the same rows, columns, nulls and
// values as arrow-go.
func TestArrowOutputOpensInJavaScript(t *testing.T) {
	jsDir := npmCI(t)
	tg := newTarget(t, backends[0])
	// A wide stage (4 workers x 2048 partitions, a few rows in each frame),
	// read as a range of 64 partitions: one stream from many small frames.
	tg.run(t, nil, "demo", "--query", "js", "--rows", "60000", "--workers", "4", "--partitions", "2048", "--quiet", "--json").must(t)
	out := filepath.Join(t.TempDir(), "p1.arrows")
	tg.run(t, nil, "read", "--query", "js", "--stage", "0", "--partitions", "100-163", "--format", "arrow", "-o", out, "--quiet").must(t)

	cmd := exec.Command("node", filepath.Join(jsDir, "check.mjs"), out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	js, err := cmd.Output()
	if err != nil {
		t.Fatalf("node check.mjs: %v\n%s", err, stderr.String())
	}
	var got struct {
		Rows    int64 `json:"rows"`
		Columns []struct {
			Name  string `json:"name"`
			Nulls int    `json:"nulls"`
		} `json:"columns"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatalf("node printed %q: %v", js, err)
	}

	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ipc.NewReader(bytes.NewReader(b), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var rows int64
	nulls := make([]int, r.Schema().NumFields())
	var firstKey string
	for r.Next() {
		rec := r.RecordBatch()
		if rows == 0 {
			firstKey = fmt.Sprint(rec.Column(0).(*array.Int64).Value(0))
		}
		rows += rec.NumRows()
		for i, c := range rec.Columns() {
			nulls[i] += c.NullN()
		}
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	if rows == 0 || got.Rows != rows {
		t.Fatalf("JavaScript read %d rows, arrow-go %d", got.Rows, rows)
	}
	if len(got.Columns) != len(nulls) {
		t.Fatalf("JavaScript saw %d columns, arrow-go %d", len(got.Columns), len(nulls))
	}
	for i, f := range r.Schema().Fields() {
		if got.Columns[i].Name != f.Name || got.Columns[i].Nulls != nulls[i] {
			t.Errorf("column %d: JavaScript %+v, arrow-go %s with %d nulls", i, got.Columns[i], f.Name, nulls[i])
		}
	}
	if !strings.Contains(string(js), `"first":"`+firstKey+`|`) {
		t.Errorf("first l_orderkey %s not what JavaScript read: %s", firstKey, js)
	}
}

// jsCannotRead lists what Apache Arrow's JavaScript implementation
// (testdata/interop-js/package-lock.json pins apache-arrow 21.2.0)
// cannot read of the type corpus, with the error it gives: a case
// whose stream it refuses whole, or case/column whose values it cannot
// get. Listed here so that the list cannot grow silently; an entry that
// JavaScript comes to read fails the test and leaves the list.
var jsCannotRead = map[string]string{
	// apache-arrow JS implements neither list views nor run-end encoding.
	"list_views":      `Unrecognized type: "ListView" (25)`,
	"run_end_encoded": `Unrecognized type: "RunEndEncoded" (22)`,
	// It reads dictionaries of 64-bit indices but its get() adds a BigInt
	// index to a number.
	"dictionary/i64_str": "Cannot mix BigInt and other types, use explicit conversions",
	"dictionary/u64_dec": "Cannot mix BigInt and other types, use explicit conversions",
}

// TestCorpusOpensInJavaScript writes every case of the type corpus
// through durashuffle (write from an Arrow IPC stream sent as an engine
// sends it, with delta dictionaries, seal, read --format arrow), checks
// that arrow-go reads back what was written (arrowcorpus.Diff), and that
// Apache Arrow's JavaScript implementation reads the same output to the
// same values: node prints each column's values in a canonical JSON form
// (testdata/interop-js/digest.mjs), the test computes the same from the
// batches (jsCanon) and compares them value by value, and the schema's
// and each top-level field's metadata. What JavaScript cannot read is
// jsCannotRead, asserted error by error.
func TestCorpusOpensInJavaScript(t *testing.T) {
	jsDir := npmCI(t)
	tg := newTarget(t, backends[0])
	cases := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(cases)
	seen := map[string]bool{}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.arrows")
			if err := os.WriteFile(in, engineStream(t, c), 0o644); err != nil {
				t.Fatal(err)
			}
			query := "js-" + c.Name
			tg.run(t, nil, "write", "-q", query, "-s", "0", "-w", "0", "--partitions", "1", "-i", in, "--quiet").must(t)
			tg.run(t, nil, "seal", "-q", query, "-s", "0", "--workers", "1", "--quiet").must(t)
			out := filepath.Join(dir, "out.arrows")
			tg.run(t, nil, "read", "-q", query, "-s", "0", "--partition", "0", "--format", "arrow", "-o", out, "--quiet").must(t)

			// arrow-go: the output is what was written.
			sc, got := readStream(t, out)
			defer func() {
				for _, b := range got {
					b.Release()
				}
			}()
			if err := arrowcorpus.Diff(c.Schema, c.Batches, sc, got); err != nil {
				t.Fatalf("arrow-go reading the output: %v", err)
			}

			cmd := exec.Command("node", filepath.Join(jsDir, "digest.mjs"), out)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			js, err := cmd.Output()
			if err != nil {
				t.Fatalf("node digest.mjs: %v\n%s", err, stderr.String())
			}
			var res struct {
				Error    string            `json:"error"`
				Rows     int64             `json:"rows"`
				Metadata map[string]string `json:"metadata"`
				Columns  []struct {
					Name     string            `json:"name"`
					Type     string            `json:"type"`
					Metadata map[string]string `json:"metadata"`
					Error    string            `json:"error"`
					Values   json.RawMessage   `json:"values"`
				} `json:"columns"`
			}
			if err := json.Unmarshal(js, &res); err != nil {
				t.Fatalf("node printed %q: %v", js, err)
			}
			if why, ok := jsCannotRead[c.Name]; ok || res.Error != "" {
				seen[c.Name] = true
				if res.Error != why {
					t.Fatalf("JavaScript reading the output: error %q, want %q", res.Error, why)
				}
				return
			}
			if res.Rows != c.Rows() || len(res.Columns) != c.Schema.NumFields() {
				t.Fatalf("JavaScript read %d rows and %d columns, want %d and %d", res.Rows, len(res.Columns), c.Rows(), c.Schema.NumFields())
			}
			if want := c.Schema.Metadata().ToMap(); !maps.Equal(res.Metadata, want) {
				t.Errorf("JavaScript read schema metadata %v, want %v", res.Metadata, want)
			}
			for k, col := range res.Columns {
				f := c.Schema.Field(k)
				key := c.Name + "/" + f.Name
				if col.Name != f.Name {
					t.Errorf("column %d: JavaScript names it %q, want %q", k, col.Name, f.Name)
				}
				// JavaScript keeps an extension type's name and metadata in
				// the field's metadata, as arrow-go writes them.
				want := f.Metadata.ToMap()
				if ext, ok := f.Type.(arrow.ExtensionType); ok {
					want["ARROW:extension:name"] = ext.ExtensionName()
					want["ARROW:extension:metadata"] = ext.Serialize()
				}
				if !maps.Equal(col.Metadata, want) {
					t.Errorf("column %q: JavaScript read field metadata %v, want %v", f.Name, col.Metadata, want)
				}
				if why, ok := jsCannotRead[key]; ok || col.Error != "" {
					seen[key] = true
					if col.Error != why {
						t.Errorf("column %q (%s): JavaScript error %q, want %q", f.Name, col.Type, col.Error, why)
					}
					continue
				}
				var jsVals []any
				if err := json.Unmarshal(col.Values, &jsVals); err != nil {
					t.Fatalf("column %q: %v", f.Name, err)
				}
				var goVals []any
				for _, b := range got {
					for i := range int(b.NumRows()) {
						goVals = append(goVals, jsCanon(b.Column(k), i))
					}
				}
				// Through JSON, as node's output: numbers become float64.
				enc, err := json.Marshal(goVals)
				if err != nil {
					t.Fatalf("column %q: %v", f.Name, err)
				}
				goVals = nil
				if err := json.Unmarshal(enc, &goVals); err != nil {
					t.Fatal(err)
				}
				if len(jsVals) != len(goVals) {
					t.Errorf("column %q (%s): JavaScript read %d values, want %d", f.Name, col.Type, len(jsVals), len(goVals))
					continue
				}
				for r := range goVals {
					if !reflect.DeepEqual(jsVals[r], goVals[r]) {
						t.Errorf("column %q (%s) row %d: JavaScript read %s, want %s", f.Name, col.Type, r, mustJSON(jsVals[r]), mustJSON(goVals[r]))
						break
					}
				}
			}
		})
	}
	for k := range jsCannotRead {
		if !seen[k] {
			t.Errorf("jsCannotRead lists %q, which JavaScript read or the corpus does not have", k)
		}
	}
}

// npmCI installs testdata/interop-js's pinned packages (npm ci, from
// package-lock.json) unless they are there, and returns the directory.
func npmCI(t *testing.T) string {
	t.Helper()
	jsDir, err := filepath.Abs("testdata/interop-js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(jsDir, "node_modules", "apache-arrow")); err != nil {
		out, err := exec.Command("npm", "ci", "--prefix", jsDir, "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			t.Fatalf("npm ci in %s (needs node and the npm registry): %v\n%s", jsDir, err, out)
		}
	}
	return jsDir
}

// engineStream is c as an engine on arrow-go sends it: an IPC stream
// with delta dictionary batches where a dictionary grows, and sliced
// list views and unions with their offsets pushed to 0, as arrow-go's
// writer needs them (arrowipc.ForIPC).
func engineStream(t *testing.T, c arrowcorpus.Case) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(c.Schema), ipc.WithDictionaryDeltas(true))
	for i, b := range c.Batches {
		cb := arrowipc.ForIPC(b, memory.DefaultAllocator)
		err := w.Write(cb)
		cb.Release()
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readStream reads an Arrow IPC stream file whole; the batches are the
// caller's to release.
func readStream(t *testing.T, path string) (*arrow.Schema, []arrow.RecordBatch) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ipc.NewReader(bytes.NewReader(b), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer r.Release()
	var out []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		out = append(out, rec)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r.Schema(), out
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// jsCanon is value i of a in digest.mjs's canonical form: what Apache
// Arrow's JavaScript implementation's get() returns for it, rendered as
// digest.mjs renders it. JavaScript does not know extension types and
// reads their storage; it gives a year-month interval as [years,
// months], a date as milliseconds since the epoch; digest.mjs gives a
// timestamp as its stored integer.
func jsCanon(a arrow.Array, i int) any {
	if ext, ok := a.(array.ExtensionArray); ok {
		return jsCanon(ext.Storage(), i)
	}
	switch a := a.(type) {
	case *array.SparseUnion:
		return jsCanon(a.Field(a.ChildID(i)), a.Data().Offset()+i)
	case *array.DenseUnion:
		return jsCanon(a.Field(a.ChildID(i)), int(a.ValueOffset(i)))
	}
	if a.IsNull(i) {
		return nil
	}
	hexOf := func(b []byte) string { return "x:" + hex.EncodeToString(b) }
	fixed := func(width int) string {
		d := a.Data()
		start := (d.Offset() + i) * width
		return hexOf(d.Buffers()[1].Bytes()[start : start+width])
	}
	num := func(f float64) any {
		switch {
		case f == 0 && math.Signbit(f):
			return "-0"
		case math.IsNaN(f):
			return "NaN"
		case math.IsInf(f, 1):
			return "Infinity"
		case math.IsInf(f, -1):
			return "-Infinity"
		}
		return f
	}
	le32 := func(vs ...int32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		return b
	}
	switch a := a.(type) {
	case *array.Null:
		return nil
	case *array.Boolean:
		return a.Value(i)
	case *array.Int8:
		return num(float64(a.Value(i)))
	case *array.Int16:
		return num(float64(a.Value(i)))
	case *array.Int32:
		return num(float64(a.Value(i)))
	case *array.Uint8:
		return num(float64(a.Value(i)))
	case *array.Uint16:
		return num(float64(a.Value(i)))
	case *array.Uint32:
		return num(float64(a.Value(i)))
	case *array.Int64:
		return fmt.Sprintf("n:%d", a.Value(i))
	case *array.Uint64:
		return fmt.Sprintf("n:%d", a.Value(i))
	case *array.Float16:
		return num(float64(a.Value(i).Float32()))
	case *array.Float32:
		return num(float64(a.Value(i)))
	case *array.Float64:
		return num(a.Value(i))
	case *array.Decimal32:
		return fixed(4)
	case *array.Decimal64:
		return fixed(8)
	case *array.Decimal128:
		return fixed(16)
	case *array.Decimal256:
		return fixed(32)
	case *array.Date32:
		return num(float64(a.Value(i)) * 86_400_000)
	case *array.Date64:
		return num(float64(a.Value(i)))
	case *array.Time32:
		return num(float64(a.Value(i)))
	case *array.Time64:
		return fmt.Sprintf("n:%d", a.Value(i))
	case *array.Timestamp:
		return fmt.Sprintf("n:%d", a.Value(i))
	case *array.Duration:
		return fmt.Sprintf("n:%d", a.Value(i))
	case *array.MonthInterval:
		m := int32(a.Value(i))
		return hexOf(le32(m/12, m%12))
	case *array.DayTimeInterval:
		return fixed(8)
	case *array.MonthDayNanoInterval:
		return fixed(16)
	case *array.String:
		return a.Value(i)
	case *array.LargeString:
		return a.Value(i)
	case *array.StringView:
		return a.Value(i)
	case *array.Binary:
		return hexOf(a.Value(i))
	case *array.LargeBinary:
		return hexOf(a.Value(i))
	case *array.BinaryView:
		return hexOf(a.Value(i))
	case *array.FixedSizeBinary:
		return hexOf(a.Value(i))
	case *array.Dictionary:
		return jsCanon(a.Dictionary(), a.GetValueIndex(i))
	case *array.Map:
		start, end := a.ValueOffsets(i)
		out := []any{}
		for j := start; j < end; j++ {
			out = append(out, []any{jsCanon(a.Keys(), int(j)), jsCanon(a.Items(), int(j))})
		}
		return out
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		out := []any{}
		for j := start; j < end; j++ {
			out = append(out, jsCanon(a.ListValues(), int(j)))
		}
		return out
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		out := []any{}
		for k := range a.NumField() {
			out = append(out, []any{st.Field(k).Name, jsCanon(a.Field(k), i)})
		}
		return out
	}
	return fmt.Sprintf("unknown:%s", a.DataType())
}
