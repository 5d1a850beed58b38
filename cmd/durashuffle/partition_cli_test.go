package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/durashuffle/durashuffle/internal/testkit/columns"
)

// writeArrowFile writes recs, all of one schema, as an Arrow IPC file.
func writeArrowFile(t *testing.T, name string, recs ...arrow.RecordBatch) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(recs[0].Schema()))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatalf("write %s: %v", name, err)
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

// TestWritePartitionByEveryEncoding: write --partition-by a string key
// stored as a string view in one file and as a dictionary in another,
// with columns of every kind of type carried; read back, each partition
// of both stages holds the same rows, each row once, every value intact,
// and the rows keyed "a" are where docs/partitioning.md's vector puts
// them.
func TestWritePartitionByEveryEncoding(t *testing.T) {
	const n, parts = 120, 4
	fields, cols := cliCarryColumns(t, n)
	ids := make([]string, n)
	keyLits := make([]string, n)
	names := []string{`"a"`, `"bravo"`, `"charlie"`, `"delta"`, `"echo"`, `"a name longer than twelve bytes"`, `"golf"`}
	for i := range n {
		ids[i] = strconv.Itoa(i)
		keyLits[i] = names[(i/2)%len(names)]
		if i%11 == 0 {
			keyLits[i] = "null"
		}
	}
	idCol := columns.FromJSON(t, arrow.PrimitiveTypes.Int64, columns.JSONList(ids))
	files := map[string]string{}
	var inRows []string
	for _, form := range []string{"view", "dictionary"} {
		k := columns.FromJSON(t, arrow.BinaryTypes.StringView, columns.JSONList(keyLits))
		if form == "dictionary" {
			k = columns.DictOf(t, arrow.BinaryTypes.String, keyLits)
		}
		fs := append([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "k", Type: k.DataType(), Nullable: true}}, fields...)
		rec := array.NewRecordBatch(arrow.NewSchema(fs, nil), append([]arrow.Array{idCol, k}, cols...), n)
		files[form] = writeArrowFile(t, form+".arrow", rec)
		if form == "view" {
			inRows = rowStrings([]arrow.RecordBatch{rec})
		}
		rec.Release()
	}

	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t, be)
			const q = "q-keys"
			for s, form := range []string{"view", "dictionary"} {
				var ws writeSummary
				tg.run(t, nil, "write", "--json", "-q", q, "-s", strconv.Itoa(s), "-w", "0", "--partitions", strconv.Itoa(parts),
					"--partition-by", "k", "-i", files[form]).must(t).decode(t, &ws)
				if !ws.Committed || ws.Rows != n || ws.InputBatches != 1 {
					t.Fatalf("write %s: %+v", form, ws)
				}
				tg.run(t, nil, "seal", "-q", q, "-s", strconv.Itoa(s), "--workers", "1").must(t)
			}
			seen := make([]int, n)
			for i := range seen {
				seen[i] = -1
			}
			for p := range parts {
				_, view := readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0", "--partition", strconv.Itoa(p)).must(t).stdout))
				_, dict := readArrowStream(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "1", "--partition", strconv.Itoa(p)).must(t).stdout))
				if len(view) != len(dict) {
					t.Fatalf("partition %d: %d rows keyed by a view, %d by a dictionary", p, len(view), len(dict))
				}
				prev := -1
				for j, row := range view {
					f := strings.SplitN(row, " | ", 3)
					id, err := strconv.Atoi(f[0])
					if err != nil || id < 0 || id >= n || seen[id] >= 0 || id <= prev {
						t.Fatalf("partition %d row %d: id %q (seen in %d, after %d)", p, j, f[0], seen[max(0, min(id, n-1))], prev)
					}
					seen[id], prev = p, id
					if row != inRows[id] {
						t.Fatalf("partition %d row %d:\n got %s\nwant %s", p, j, row, inRows[id])
					}
					// The dictionary-keyed stage: the same row, its key
					// read back as the dictionary's value.
					if dict[j] != inRows[id] {
						t.Fatalf("partition %d row %d keyed by a dictionary:\n got %s\nwant %s", p, j, dict[j], inRows[id])
					}
					if keyLits[id] == `"a"` && p != 0 {
						t.Fatalf("row %d keyed \"a\" in partition %d, docs/partitioning.md's vector says 0 of 4", id, p)
					}
				}
			}
			for i, p := range seen {
				if p < 0 {
					t.Fatalf("row %d read back in no partition", i)
				}
				if keyLits[i] == "null" && p != seen[0] {
					t.Fatalf("null keys in partitions %d and %d", seen[0], p)
				}
			}
			if !slices.ContainsFunc(seen, func(p int) bool { return p != seen[0] }) {
				t.Fatalf("every row in partition %d", seen[0])
			}
		})
	}
}

// TestWritePartitionByRefused: a nested or null-type key is refused
// before anything is written, naming the column and its type.
func TestWritePartitionByRefused(t *testing.T) {
	const n = 10
	fields, cols := cliCarryColumns(t, n)
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, n)
	file := writeArrowFile(t, "in.arrow", rec)
	rec.Release()
	tg := newTarget(t, backends[0])
	for _, c := range []struct{ col, typ string }{
		{"struct_of_union", "struct<a: int32 nullable, u: sparse_union<"},
		{"sparse_union", "sparse_union<i: type=int32"},
		{"dense_union", "dense_union<i: type=int32"},
		{"list_view", "list_view<item: int32, nullable>"},
		{"map", "map<utf8, int32"},
	} {
		r := tg.run(t, nil, "write", "-q", "q-refused", "-w", "0", "--partitions", "2", "--partition-by", c.col, "-i", file)
		want := "--partition-by " + c.col + ": cannot partition by a column of type " + c.typ
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("--partition-by %s: exit %d, want 2 and %q\n%s", c.col, r.code, want, r.stderr)
		}
	}
	var ls lsOutput
	tg.run(t, nil, "ls", "--json").must(t).decode(t, &ls)
	if len(ls.Queries) != 0 {
		t.Fatalf("ls after refused writes: %+v", ls)
	}
}

// cliCarryColumns are columns.CarryColumns but the null-type column, which the
// writer's batch validation refuses on its own.
func cliCarryColumns(t *testing.T, n int) ([]arrow.Field, []arrow.Array) {
	fields, cols := columns.CarryColumns(t, n)
	i := slices.IndexFunc(fields, func(f arrow.Field) bool { return f.Type.ID() == arrow.NULL })
	return slices.Delete(fields, i, i+1), slices.Delete(cols, i, i+1)
}
