package main

import (
	"context"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/hostile"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestWriteRefusesCorruptInput: `write -i -` of an Arrow stream whose
// string column has offsets[0] = -20, partitioned by that column, exits 1
// naming the input batch, the column and the offset (before, the
// partitioning read the corrupt offsets and the command panicked), and
// leaves the bucket with no manifest, object or open upload.
func TestWriteRefusesCorruptInput(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[0])
	var bad hostile.Case
	for _, c := range hostile.Cases() {
		if c.Name == "negative first offset" {
			bad = c
		}
	}
	r := tg.run(t, bad.Stream, "write", "-q", "corrupt", "-w", "0", "--partitions", "4", "--partition-by", "name", "-i", "-")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", r.code, r.stderr)
	}
	t.Logf("stderr: %s", r.stderr)
	for _, want := range []string{"input batch 1", "invalid record batch", `column 1 "name" (utf8)`, "negative: -20"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "panic") {
		t.Errorf("the command panicked:\n%s", r.stderr)
	}
	st, _ := tg.ep.NewStore(t)
	ctx := context.Background()
	if objs, _, err := st.List(ctx, "", ""); err != nil || len(objs) != 0 {
		t.Fatalf("bucket after the refused write: %v, %v", objs, err)
	}
	if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Fatalf("open uploads after the refused write: %v, %v", ups, err)
	}
	_, err := manifest.LoadWorker(ctx, st, manifest.Layout{Prefix: "durashuffle"}, "corrupt", 0, "0")
	if !store.IsNotFound(err) {
		t.Fatalf("worker manifest: %v, want none", err)
	}
}
