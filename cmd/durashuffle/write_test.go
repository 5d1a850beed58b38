package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "price", Type: arrow.PrimitiveTypes.Float64},
	{Name: "day", Type: arrow.FixedWidthTypes.Date32},
	{Name: "ok", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
}, nil)

var testNames = []string{"alpha", "bravo", "charlie", "delta", "echo, with a comma", `foxtrot "quoted"`, "golf"}

// testBatches makes rows [lo, hi) in batches of n rows.
func testBatches(t *testing.T, lo, hi, n int) []arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	var out []arrow.RecordBatch
	for i := lo; i < hi; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%17 == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(testNames[i%len(testNames)])
		}
		b.Field(2).(*array.Float64Builder).Append(float64(i) * 1.25)
		b.Field(3).(*array.Date32Builder).Append(arrow.Date32(10000 + i%365))
		b.Field(4).(*array.BooleanBuilder).Append(i%3 == 0)
		lb := b.Field(5).(*array.ListBuilder)
		if i%11 == 0 {
			lb.AppendNull()
		} else {
			lb.Append(true)
			for k := range i % 4 {
				lb.ValueBuilder().(*array.Int32Builder).Append(int32(i + k))
			}
		}
		if (i-lo+1)%n == 0 || i == hi-1 {
			out = append(out, b.NewRecordBatch())
		}
	}
	t.Cleanup(func() {
		for _, r := range out {
			r.Release()
		}
	})
	return out
}

func arrowFile(t *testing.T, recs []arrow.RecordBatch) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in.arrow")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func arrowStream(t *testing.T, recs []arrow.RecordBatch) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(testSchema), ipc.WithLZ4())
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rowStrings renders every row of recs as one string of its values.
func rowStrings(recs []arrow.RecordBatch) []string {
	var out []string
	for _, r := range recs {
		for i := range int(r.NumRows()) {
			var sb strings.Builder
			for c, col := range r.Columns() {
				if c > 0 {
					sb.WriteString(" | ")
				}
				if col.IsNull(i) {
					sb.WriteString("NULL")
				} else {
					sb.WriteString(col.ValueStr(i))
				}
			}
			out = append(out, sb.String())
		}
	}
	return out
}

// readArrowStream parses an Arrow IPC stream with arrow-go's own reader,
// independently of durashuffle's decoding.
func readArrowStream(t *testing.T, b []byte) (*arrow.Schema, []string) {
	t.Helper()
	rd, err := ipc.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not an Arrow IPC stream: %v", err)
	}
	defer rd.Release()
	var recs []arrow.RecordBatch
	for rd.Next() {
		r := rd.RecordBatch()
		r.Retain()
		recs = append(recs, r)
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	return rd.Schema(), rowStrings(recs)
}

// byPartition orders rows the way the reader streams them: partition
// ascending, then by worker, then in write order. keys[w][i] is the id
// of worker w's row i.
func byPartition(rows [][]string, ids [][]int64, partitions int) [][]string {
	out := make([][]string, partitions)
	for p := range partitions {
		for w := range rows {
			for i, id := range ids[w] {
				if demo.PartitionOf(id, partitions) == p {
					out[p] = append(out[p], rows[w][i])
				}
			}
		}
	}
	return out
}

func idsOf(lo, hi int) []int64 {
	out := make([]int64, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, int64(i))
	}
	return out
}

func jsonLinesOf(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d is not a JSON object: %v: %s", len(out)+1, err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func TestWriteSealRead(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t, b)
			const q, parts = "q-cli", 4
			w0 := testBatches(t, 0, 6000, 1000)
			w1 := testBatches(t, 6000, 9000, 700)
			file := arrowFile(t, w0)

			if out := tg.run(t, nil, "ls", "--query", q).must(t).stdout; !strings.Contains(out, "no committed stages") {
				t.Fatalf("ls of an empty query:\n%s", out)
			}

			var ws writeSummary
			tg.run(t, nil, "write", "--json", "-q", q, "-s", "0", "-w", "0", "--partitions", "4",
				"--partition-by", "id", "-i", file).must(t).decode(t, &ws)
			if !ws.Committed || ws.Rows != 6000 || ws.InputFormat != "file" || ws.InputBatches != 6 || ws.Objects != 1 || ws.Parts != 1 {
				t.Fatalf("write from file: %+v", ws)
			}
			// A small output is one PutObject, plus the manifest.
			if ws.Requests["PutObject"] != 2 || ws.Requests["CreateMultipartUpload"] != 0 {
				t.Fatalf("write requests %v", ws.Requests)
			}
			// Before it, the commit guard's one probe: two puts, a delete.
			if ws.CommitGuard != "enforced" || fmt.Sprint(ws.GuardRequests) != "map[DeleteObjects:1 PutObject:2]" {
				t.Fatalf("commit guard %q with requests %v, want enforced after 2 PutObject and 1 DeleteObjects", ws.CommitGuard, ws.GuardRequests)
			}

			var ls lsOutput
			tg.run(t, nil, "ls", "--json", "--query", q).must(t).decode(t, &ls)
			if len(ls.Queries) != 1 || len(ls.Queries[0].Stages) != 1 || ls.Queries[0].Stages[0] != (lsStage{Stage: 0, Workers: 1}) {
				t.Fatalf("ls before seal: %+v", ls)
			}

			tg.run(t, arrowStream(t, w1), "write", "--json", "-q", q, "-s", "0", "-w", "1", "--partitions", "4",
				"--partition-by", "id", "-i", "-").must(t).decode(t, &ws)
			if !ws.Committed || ws.Rows != 3000 || ws.InputFormat != "stream" || ws.InputBatches != 5 {
				t.Fatalf("write from stdin: %+v", ws)
			}

			// Another attempt of worker 0 loses and leaves nothing.
			r := tg.run(t, nil, "write", "-q", q, "-s", "0", "-w", "0", "--attempt", "retry", "--partitions", "4",
				"--partition-by", "id", "-i", file)
			if r.code != 1 || !strings.Contains(r.stderr, "already committed") {
				t.Fatalf("second attempt: exit %d\n%s", r.code, r.stderr)
			}

			var ss sealSummary
			tg.run(t, nil, "seal", "--json", "-q", q, "-s", "0", "--workers", "2").must(t).decode(t, &ss)
			if !ss.Sealed || ss.Rows != 9000 || ss.Workers != 2 || ss.Partitions != parts {
				t.Fatalf("seal: %+v", ss)
			}

			want := byPartition([][]string{rowStrings(w0), rowStrings(w1)}, [][]int64{idsOf(0, 6000), idsOf(6000, 9000)}, parts)
			var all []string
			for _, p := range want {
				all = append(all, p...)
			}

			t.Run("arrow", func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "all.arrows")
				tg.run(t, nil, "read", "-q", q, "-s", "0", "--partitions", "0-3", "-o", out).must(t)
				b, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				schema, got := readArrowStream(t, b)
				if !schema.Equal(testSchema) {
					t.Fatalf("schema %s, want %s", schema, testSchema)
				}
				compareRows(t, got, all)

				// The whole stage as results, to stdout, is the same stream.
				_, got = readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0").must(t).stdout))
				compareRows(t, got, all)

				for p := range parts {
					_, got := readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--partition", strconv.Itoa(p)).must(t).stdout))
					compareRows(t, got, want[p])
				}
			})

			t.Run("storage order", func(t *testing.T) {
				// The same rows, in storage order: worker 0's before
				// worker 1's; only the order within a worker differs.
				_, got := readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--order", "storage").must(t).stdout))
				if len(got) != len(all) {
					t.Fatalf("%d rows, want %d", len(got), len(all))
				}
				n0 := len(rowStrings(w0))
				compareRows(t, slices.Sorted(slices.Values(got[:n0])), slices.Sorted(slices.Values(rowStrings(w0))))
				compareRows(t, slices.Sorted(slices.Values(got[n0:])), slices.Sorted(slices.Values(rowStrings(w1))))
				// A partition subset and a page of it.
				_, got = readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--order", "storage", "--partition", "2").must(t).stdout))
				compareRows(t, slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want[2])))
				_, page := readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--order", "storage", "--partition", "2", "--offset", "5", "--limit", "7").must(t).stdout))
				compareRows(t, page, got[5:12])
				if r := tg.run(t, nil, "read", "-q", q, "-s", "0", "--order", "random"); r.code != 2 || !strings.Contains(r.stderr, `--order "random": want partition or storage`) {
					t.Fatalf("--order random: exit %d\n%s", r.code, r.stderr)
				}
			})

			t.Run("page", func(t *testing.T) {
				_, got := readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--offset", "1000", "--limit", "2500").must(t).stdout))
				compareRows(t, got, all[1000:3500])
				_, got = readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--offset", "8990").must(t).stdout))
				compareRows(t, got, all[8990:])
				_, got = readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--partition", "1", "--offset", "10", "--limit", "5").must(t).stdout))
				compareRows(t, got, want[1][10:15])
				// Past the end: a valid, empty stream.
				schema, got := readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--offset", "9000").must(t).stdout))
				if len(got) != 0 || !schema.Equal(testSchema) {
					t.Fatalf("page past the end: %d rows, schema %s", len(got), schema)
				}
			})

			t.Run("jsonl", func(t *testing.T) {
				lines := jsonLinesOf(t, tg.run(t, nil, "read", "-q", q, "-s", "0", "--format", "jsonl", "--offset", "1000", "--limit", "500").must(t).stdout)
				if len(lines) != 500 {
					t.Fatalf("%d lines, want 500", len(lines))
				}
				for i, m := range lines {
					id, _ := m["id"].(float64)
					if want := strings.SplitN(all[1000+i], " | ", 2)[0]; strconv.FormatInt(int64(id), 10) != want {
						t.Fatalf("line %d: id %v, want %s", i, m["id"], want)
					}
					if len(m) != len(testSchema.Fields()) {
						t.Fatalf("line %d has %d keys: %v", i, len(m), m)
					}
					if int64(id)%17 == 0 && m["name"] != nil {
						t.Fatalf("line %d: name %v, want null", i, m["name"])
					}
				}
				// Columns come in schema order.
				first := strings.SplitN(tg.run(t, nil, "read", "-q", q, "-s", "0", "--format", "jsonl", "--limit", "1").must(t).stdout, "\n", 2)[0]
				if !strings.HasPrefix(first, `{"id":`) || strings.Index(first, `"name":`) > strings.Index(first, `"tags":`) {
					t.Fatalf("columns out of order: %s", first)
				}
			})

			t.Run("csv", func(t *testing.T) {
				out := tg.run(t, nil, "read", "-q", q, "-s", "0", "--format", "csv", "--partition", "2").must(t).stdout
				recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
				if err != nil {
					t.Fatalf("not CSV: %v\n%s", err, out)
				}
				if strings.Join(recs[0], ",") != "id,name,price,day,ok,tags" {
					t.Fatalf("header %q", recs[0])
				}
				if len(recs)-1 != len(want[2]) {
					t.Fatalf("%d CSV rows, want %d", len(recs)-1, len(want[2]))
				}
				for i, rec := range recs[1:] {
					f := strings.Split(want[2][i], " | ")
					name := f[1]
					if name == "NULL" {
						name = ""
					}
					if rec[0] != f[0] || rec[1] != name {
						t.Fatalf("CSV row %d: %q, want id %s name %q", i, rec, f[0], name)
					}
				}
			})

			t.Run("partition by string", func(t *testing.T) {
				tg.run(t, arrowStream(t, w1), "write", "-q", q, "-s", "1", "-w", "0", "--partitions", "3",
					"--partition-by", "name").must(t)
				tg.run(t, nil, "seal", "-q", q, "-s", "1", "--workers", "1").must(t)
				seen := map[string]int{}
				total := 0
				for p := range 3 {
					for _, m := range jsonLinesOf(t, tg.run(t, nil, "read", "-q", q, "-s", "1", "--partition", strconv.Itoa(p), "--format", "jsonl").must(t).stdout) {
						name := fmt.Sprint(m["name"])
						if prev, ok := seen[name]; ok && prev != p {
							t.Fatalf("name %q in partitions %d and %d", name, prev, p)
						}
						seen[name] = p
						total++
					}
				}
				if total != 3000 || len(seen) < 3 {
					t.Fatalf("read %d rows with %d distinct names", total, len(seen))
				}
				var ls lsOutput
				tg.run(t, nil, "ls", "--json").must(t).decode(t, &ls)
				if len(ls.Queries) != 1 || len(ls.Queries[0].Stages) != 2 || !ls.Queries[0].Stages[1].Sealed {
					t.Fatalf("ls: %+v", ls)
				}
			})

			t.Run("out of range", func(t *testing.T) {
				r := tg.run(t, nil, "read", "-q", q, "-s", "0", "--partition", "9", "--format", "jsonl")
				if r.code != 2 || !strings.Contains(r.stderr, "partition") {
					t.Fatalf("partition 9 of 4: exit %d\n%s", r.code, r.stderr)
				}
			})
		})
	}
}

func compareRows(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("row %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
