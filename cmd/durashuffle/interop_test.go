package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestArrowOutputOpensInJavaScript writes a demo stage, reads a partition
// with `read --format arrow`, and opens the bytes with Apache Arrow's
// JavaScript implementation (testdata/interop-js, installed with npm ci):
// another Arrow implementation must see the same rows, columns, nulls and
// values as arrow-go.
func TestArrowOutputOpensInJavaScript(t *testing.T) {
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
