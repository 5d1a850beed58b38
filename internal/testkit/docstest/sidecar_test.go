package docstest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/sidecar"
)

// sidecarDoc is the page whose Go client this test runs.
const sidecarDoc = "docs/sidecar.md"

// exampleMain calls the page's writeAndRead with two partitions: two
// batches of 3 rows in partition 0, one of 2 rows in partition 1.
const exampleMain = `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

var sidecarAddr = os.Getenv("SIDECAR_ADDR")

func main() {
	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.PrimitiveTypes.Int64}}, nil)
	batch := func(vals ...int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).AppendValues(vals, nil)
		return b.NewRecordBatch()
	}
	batches := [][]arrow.RecordBatch{{batch(1, 2, 3), batch(4, 5, 6)}, {batch(7, 8)}}
	if err := writeAndRead(context.Background(), os.Getenv("SIDECAR_TOKEN"), schema, batches); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}
`

// TestSidecarGoClient runs the Go client of docs/sidecar.md, as printed
// there (only its address replaced), against a sidecar with a bearer
// token: its DoPut, commit message included, must commit what it sent,
// and its DoGet must read partition 0 back.
func TestSidecarGoClient(t *testing.T) {
	b, err := os.ReadFile(repoFile(t, sidecarDoc))
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.HasPrefix(m[1], "import (") && strings.Contains(m[1], "func writeAndRead(") {
			example = m[1]
		}
	}
	if example == "" {
		t.Fatalf("%s has no Go block with imports and func writeAndRead", sidecarDoc)
	}
	if strings.Count(example, `"127.0.0.1:8815"`) != 1 {
		t.Fatalf(`the example dials "127.0.0.1:8815" %d times, want once`, strings.Count(example, `"127.0.0.1:8815"`))
	}
	example = "package main\n\n" + strings.Replace(example, `"127.0.0.1:8815"`, "sidecarAddr", 1)
	// Inside the module, so the example builds with its pinned
	// dependencies; "_" keeps it out of ./... while it exists.
	dir, err := os.MkdirTemp(".", "_sidecar-example-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for name, src := range map[string]string{"client.go": example, "main.go": exampleMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	st, _ := testenv.Embedded(t).NewStore(t)
	cfg := durashuffle.DefaultConfig()
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Sidecar.AuthToken = "doc-example-token"
	c := testenv.Client(t, cfg, durashuffle.WithStore(st))
	t.Cleanup(c.Close)
	srv, err := sidecar.New(c, sidecar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})

	cmd := exec.Command("go", "run", "./"+filepath.Base(dir))
	cmd.Env = append(os.Environ(), "SIDECAR_ADDR="+ln.Addr().String(), "SIDECAR_TOKEN="+cfg.Sidecar.AuthToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run the docs' Go client: %v\n%s", err, out)
	}
	_, rest, ok := strings.Cut(string(out), "committed: ")
	if !ok {
		t.Fatalf("the client printed no commit:\n%s", out)
	}
	line, reads, _ := strings.Cut(rest, "\n")
	var res flightclient.PutResult
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		t.Fatalf("PutResult %q: %v", line, err)
	}
	if !res.Committed || res.Batches != 3 || res.Rows != 8 || res.Worker != "3" || res.Partitions != 2 {
		t.Fatalf("the docs' client committed %+v, want 3 batches, 8 rows of worker 3 in 2 partitions", res)
	}
	var rows int
	for _, l := range strings.Split(strings.TrimSpace(reads), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "%d rows", &n); err != nil {
			t.Fatalf("the client printed %q after the commit, want \"N rows\" lines", l)
		}
		rows += n
	}
	if rows != 6 {
		t.Fatalf("the docs' client read %d rows of partition 0, want 6:\n%s", rows, reads)
	}
}
