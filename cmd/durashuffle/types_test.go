package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/endian"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
)

// writeIPC writes b with its sliced list views and unions at offset 0,
// which arrow-go's IPC writer needs (arrowipc.ForIPC).
func writeIPC(w interface{ Write(arrow.RecordBatch) error }, b arrow.RecordBatch) error {
	out := arrowipc.ForIPC(b, memory.DefaultAllocator)
	defer out.Release()
	return w.Write(out)
}

// corpusFile writes cs as an Arrow IPC file (with delta dictionaries
// where a dictionary grows) and returns its path.
func corpusFile(t *testing.T, cs arrowcorpus.Case) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), cs.Name+".arrow")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(cs.Schema), ipc.WithDictionaryDeltas(true))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range cs.Batches {
		if err := writeIPC(w, b); err != nil {
			t.Fatalf("%s: IPC file batch %d: %v", cs.Name, i, err)
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

// corpusStream writes cs as an Arrow IPC stream, delta dictionaries where
// a dictionary grows, and returns its path.
func corpusStream(t *testing.T, cs arrowcorpus.Case) string {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(cs.Schema), ipc.WithDictionaryDeltas(true))
	for i, b := range cs.Batches {
		if err := writeIPC(w, b); err != nil {
			t.Fatalf("%s: IPC stream batch %d: %v", cs.Name, i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), cs.Name+".arrows")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readIPC decodes an Arrow IPC file or stream with arrow-go, swapping
// big-endian input to native order.
func readIPC(t *testing.T, b []byte) (*arrow.Schema, []arrow.RecordBatch) {
	t.Helper()
	var recs []arrow.RecordBatch
	t.Cleanup(func() {
		for _, r := range recs {
			r.Release()
		}
	})
	if bytes.HasPrefix(b, []byte(arrowFileMagic)) {
		fr, err := ipc.NewFileReader(bytes.NewReader(b), ipc.WithEnsureNativeEndian(true))
		if err != nil {
			t.Fatalf("not an Arrow IPC file: %v", err)
		}
		defer fr.Close()
		for i := range fr.NumRecords() {
			r, err := fr.RecordBatch(i)
			if err != nil {
				t.Fatal(err)
			}
			r.Retain()
			recs = append(recs, r)
		}
		return fr.Schema(), recs
	}
	rd, err := ipc.NewReader(bytes.NewReader(b), ipc.WithEnsureNativeEndian(true))
	if err != nil {
		t.Fatalf("not an Arrow IPC stream: %v", err)
	}
	defer rd.Release()
	for rd.Next() {
		r := rd.RecordBatch()
		r.Retain()
		recs = append(recs, r)
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	return rd.Schema(), recs
}

// sliceRows returns rows [lo, hi) of batches, as slices of them.
func sliceRows(batches []arrow.RecordBatch, lo, hi int64) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	var at int64
	for _, b := range batches {
		n := b.NumRows()
		from, to := max(lo-at, 0), min(hi-at, n)
		if from < to {
			out = append(out, b.NewSlice(from, to))
		}
		at += n
	}
	return out
}

// TestWriteRefusesHostileUnion: an IPC stream whose dense union has an
// offset past its child, or a type id the union does not declare, is
// refused by write -i with the column named, and nothing is committed.
func TestWriteRefusesHostileUnion(t *testing.T) {
	tg := newTarget(t, backends[0])
	fields := []arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}
	dt := arrow.DenseUnionOf(fields, []arrow.UnionTypeCode{2, 9})
	sc := arrow.NewSchema([]arrow.Field{{Name: "u", Type: dt}}, nil)
	mem := memory.DefaultAllocator
	ints, _, _ := array.FromJSON(mem, arrow.PrimitiveTypes.Int32, strings.NewReader(`[1, 2]`))
	strs, _, _ := array.FromJSON(mem, arrow.BinaryTypes.String, strings.NewReader(`["a"]`))
	defer ints.Release()
	defer strs.Release()
	for i, tc := range []struct {
		types   []byte
		offsets []int32
		want    string
	}{
		{[]byte{2, 9, 9}, []int32{0, 0, 5}, `value 2 (type id 9) has offset 5, past the 1 values of child 1 "s"`},
		{[]byte{2, 7}, []int32{0, 0}, `value 1 has type id 7, not one of the union's type codes [2 9]`},
	} {
		d := array.NewData(dt, len(tc.types), []*memory.Buffer{nil, memory.NewBufferBytes(tc.types), memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(tc.offsets))},
			[]arrow.ArrayData{ints.Data(), strs.Data()}, 0, 0)
		u := array.MakeFromData(d)
		d.Release()
		rec := array.NewRecordBatch(sc, []arrow.Array{u}, int64(len(tc.types)))
		u.Release()
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		w.Close()
		rec.Release()
		q := "hostile-union-" + strconv.Itoa(i)
		r := tg.run(t, buf.Bytes(), "write", "-q", q, "-s", "0", "-w", "0", "--partitions", "1", "-i", "-")
		if r.code != 1 || !strings.Contains(r.stderr, `column 0 "u" (dense_union<`) || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "panic") {
			t.Errorf("exit %d, want 1 and an error naming the column and %q:\n%s", r.code, tc.want, r.stderr)
		}
		if ls := tg.run(t, nil, "ls", "--query", q).must(t).stdout; !strings.Contains(ls, "no committed stages") {
			t.Errorf("after the refused write: %s", ls)
		}
	}
}

// textOutcome is what read --format csv|jsonl did with a case.
type textOutcome struct {
	ok   bool
	text string // the error
}

// sliceSource is a recordSource over batches in memory.
type sliceSource struct {
	sc      *arrow.Schema
	batches []arrow.RecordBatch
	i       int
}

func (s *sliceSource) Schema() *arrow.Schema { return s.sc }
func (s *sliceSource) Next() bool            { s.i++; return s.i <= len(s.batches) }
func (s *sliceSource) RecordBatch() arrow.RecordBatch {
	return s.batches[s.i-1]
}
func (s *sliceSource) Err() error { return nil }
func (s *sliceSource) Release()   {}

// checkText runs read --format csv and jsonl of query q and checks the
// outcome: either every row (a CSV record after the header, a JSON
// object with one key per column), byte for byte the text the same
// writer makes of the batches written (want), or an exit code of 1 with
// an error naming a column, its type and the format; never a panic.
func checkText(t *testing.T, tg target, q string, sc *arrow.Schema, want []arrow.RecordBatch) map[string]textOutcome {
	var rows int64
	for _, w := range want {
		rows += w.NumRows()
	}
	out := map[string]textOutcome{}
	for _, format := range []string{"csv", "jsonl"} {
		r := tg.run(t, nil, "read", "-q", q, "-s", "0", "--format", format)
		if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
			t.Fatalf("%s: %s", format, r.stderr)
		}
		if r.code != 0 {
			if r.code != 1 || !strings.Contains(r.stderr, format+" output: column ") {
				t.Errorf("%s: exit %d without naming the column:\n%s", format, r.code, r.stderr)
			}
			out[format] = textOutcome{text: strings.TrimSpace(r.stderr)}
			continue
		}
		switch format {
		case "csv":
			recs, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
			if err != nil {
				t.Fatalf("csv output does not parse: %v\n%s", err, r.stdout)
			}
			n := int64(len(recs))
			if sc.NumFields() == 1 {
				// One column: a null is an empty line, which Go's CSV
				// reader skips (the limit read's help states).
				for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
					if l == "" {
						n++
					}
				}
			}
			if n != rows+1 {
				t.Errorf("csv: %d records, want a header and %d rows:\n%s", n, rows, r.stdout)
			}
			for i, rec := range recs {
				if len(rec) != sc.NumFields() {
					t.Errorf("csv record %d: %d fields, want %d", i, len(rec), sc.NumFields())
				}
			}
		case "jsonl":
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if r.stdout == "" {
				lines = nil
			}
			if int64(len(lines)) != rows {
				t.Errorf("jsonl: %d lines, want %d:\n%s", len(lines), rows, r.stdout)
			}
			for i, l := range lines {
				var m map[string]json.RawMessage
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("jsonl line %d: %v\n%s", i, err, l)
				}
				if len(m) != sc.NumFields() {
					t.Errorf("jsonl line %d: %d keys, want %d: %s", i, len(m), sc.NumFields(), l)
				}
			}
		}
		var buf bytes.Buffer
		if _, err := writeRecords(&buf, format, sc, &sliceSource{sc: sc, batches: want}); err != nil {
			t.Fatalf("%s of the batches written: %v", format, err)
		}
		if buf.String() != r.stdout {
			t.Errorf("%s read back:\n%s\nwant, as the batches written render:\n%s", format, r.stdout, buf.String())
		}
		out[format] = textOutcome{ok: true, text: r.stdout}
	}
	return out
}

// TestCorpusThroughCLI writes, on every backend, every case of the type corpus
// (internal/testkit/arrowcorpus) with write -i from an Arrow IPC file
// (with delta dictionaries; not for cases whose dictionaries are
// replaced, which the file format cannot hold) and from a stream, seals
// it and reads it back with read --format arrow, as results, as a
// partition and in storage order: the schema with its metadata and every
// value come back. read --format csv and jsonl either write every row or
// fail naming the column they cannot express.
func TestCorpusThroughCLI(t *testing.T) {
	cases := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(cases)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			tg := newTarget(t, b)
			for _, cs := range cases {
				t.Run(cs.Name, func(t *testing.T) {
					inputs := [][2]string{{"stream", corpusStream(t, cs)}}
					if !cs.Replaces {
						inputs = append(inputs, [2]string{"file", corpusFile(t, cs)})
					}
					for _, in := range inputs {
						q := "cli-" + strings.ReplaceAll(cs.Name, "_", "-") + "-" + in[0]
						var ws writeSummary
						tg.run(t, nil, "write", "--json", "-q", q, "-s", "0", "-w", "0", "--partitions", "1", "-i", in[1]).must(t).decode(t, &ws)
						if ws.Rows != cs.Rows() || ws.InputFormat != in[0] {
							t.Fatalf("%s: write: %d rows from a %s, want %d from a %s", in[0], ws.Rows, ws.InputFormat, cs.Rows(), in[0])
						}
						tg.run(t, nil, "seal", "-q", q, "-s", "0", "--workers", "1").must(t)
						for _, args := range [][]string{nil, {"--partition", "0"}, {"--order", "storage"}} {
							out := tg.run(t, nil, append([]string{"read", "-q", q, "-s", "0"}, args...)...).must(t)
							sc, got := readIPC(t, []byte(out.stdout))
							if err := arrowcorpus.Diff(cs.Schema, cs.Batches, sc, got); err != nil {
								t.Errorf("%s, read %v: %v", in[0], args, err)
							}
						}
						if n := cs.Rows(); n >= 3 {
							// A page whose first and last batches are slices.
							out := tg.run(t, nil, "read", "-q", q, "-s", "0", "--offset", "1", "--limit", strconv.FormatInt(n-2, 10)).must(t)
							sc, got := readIPC(t, []byte(out.stdout))
							want := sliceRows(cs.Batches, 1, n-1)
							if err := arrowcorpus.Diff(cs.Schema, want, sc, got); err != nil {
								t.Errorf("%s, rows [1, %d): %v", in[0], n-1, err)
							}
							for _, w := range want {
								w.Release()
							}
						}
						for f, o := range checkText(t, tg, q, cs.Schema, cs.Batches) {
							if o.ok {
								t.Logf("%s %s: ok", in[0], f)
							} else {
								t.Logf("%s %s: %s", in[0], f, o.text)
							}
						}
					}
				})
			}
		})
	}
}

// fileEndianness is the byte order an IPC file or stream declares.
func fileEndianness(t *testing.T, b []byte) endian.Endianness {
	if bytes.HasPrefix(b, []byte(arrowFileMagic)) {
		fr, err := ipc.NewFileReader(bytes.NewReader(b), ipc.WithEnsureNativeEndian(false))
		if err != nil {
			t.Fatal(err)
		}
		defer fr.Close()
		return fr.Schema().Endianness()
	}
	rd, err := ipc.NewReader(bytes.NewReader(b), ipc.WithEnsureNativeEndian(false))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	return rd.Schema().Endianness()
}

// TestBigEndianInput writes Arrow's big-endian integration files
// (testdata/bigendian, from apache/arrow-testing, written by Arrow C++ on
// a big-endian machine) with write -i and reads them back with read
// --format arrow: the values are those arrow-go decodes from the file,
// swapped to native order.
func TestBigEndianInput(t *testing.T) {
	tg := newTarget(t, backends[0])
	files, err := filepath.Glob("testdata/bigendian/*.arrow_file")
	streams, serr := filepath.Glob("testdata/bigendian/*.stream")
	files = append(files, streams...)
	if err != nil || serr != nil || len(files) < 20 || len(streams) == 0 {
		t.Fatalf("%d files in testdata/bigendian: %v", len(files), err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			wantSchema, want := readIPC(t, b)
			if e := fileEndianness(t, b); e != endian.BigEndian {
				t.Fatalf("%s is %s: the test proves less than it says", name, e)
			}
			q := "be-" + strings.NewReplacer("_", "-", ".", "-").Replace(name)
			r := tg.run(t, nil, "write", "-q", q, "-s", "0", "-w", "0", "--partitions", "1", "-i", path)
			if r.code != 0 {
				t.Fatalf("write: exit %d\n%s", r.code, r.stderr)
			}
			tg.run(t, nil, "seal", "-q", q, "-s", "0", "--workers", "1").must(t)
			sc, got := readIPC(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0").must(t).stdout))
			if err := arrowcorpus.Diff(wantSchema.WithEndianness(endian.NativeEndian), want, sc, got); err != nil {
				t.Errorf("read back: %v", err)
			}
			for f, o := range checkText(t, tg, q, wantSchema, want) {
				if !o.ok {
					t.Logf("%s: %s", f, o.text)
				}
			}
		})
	}
}
