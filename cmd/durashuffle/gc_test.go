package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/store"
)

var blobSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "blob", Type: arrow.BinaryTypes.Binary},
}, nil)

// blobBatch is rows [lo, lo+n), each with size random (incompressible)
// bytes derived from its id.
func blobBatch(lo, n, size int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, blobSchema)
	defer b.Release()
	buf := make([]byte, size)
	for i := lo; i < lo+n; i++ {
		r := rand.New(rand.NewPCG(uint64(i), 99))
		for j := 0; j < len(buf); j += 8 {
			v := r.Uint64()
			for k := 0; k < 8 && j+k < len(buf); k++ {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.BinaryBuilder).Append(buf)
	}
	return b.NewRecordBatch()
}

// crashInput is the killed writer's input: 12 MiB in rows of 64 KiB, then
// one 6 MiB row. With chunk_size and max_object_size both 5 MiB the small
// rows fill objects that each fit one chunk (single PutObjects, complete
// but uncommitted: orphans), and the big row, which cannot be split, makes
// an object of two chunks: a multipart upload whose first part is sent
// while the second waits for more input that never comes.
func crashInput() []arrow.RecordBatch {
	var out []arrow.RecordBatch
	for i := range 12 {
		out = append(out, blobBatch(i*16, 16, 64<<10))
	}
	return append(out, blobBatch(1000, 1, 6<<20))
}

// rowDigests reads an Arrow IPC stream of blobSchema into "id:sha256".
func rowDigests(t *testing.T, b []byte) []string {
	t.Helper()
	rd, err := ipc.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not an Arrow IPC stream: %v", err)
	}
	defer rd.Release()
	var out []string
	for rd.Next() {
		rec := rd.RecordBatch()
		ids := rec.Column(0).(*array.Int64)
		blobs := rec.Column(1).(*array.Binary)
		for i := range int(rec.NumRows()) {
			sum := sha256.Sum256(blobs.Value(i))
			out = append(out, fmt.Sprintf("%d:%s", ids.Value(i), hex.EncodeToString(sum[:8])))
		}
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKilledWriterIsCleanedUp kills a real `durashuffle write` process with
// SIGKILL in the middle of its upload, then checks that the stage is
// invisible, that gc aborts the upload and deletes the orphaned objects,
// and that a new attempt of the worker commits and reads back whole.
func TestKilledWriterIsCleanedUp(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[1]) // MinIO
	st, _ := tg.ep.NewStore(t)
	ctx := context.Background()
	const q = "crash"
	prefix := "durashuffle/" + q + "/"
	args := []string{"write", "-q", q, "-s", "0", "-w", "0", "--partitions", "1", "-i", "-",
		"--chunk-size", "5MiB", "--max-object-size", "5MiB", "--compression", "none", "--hedge-factor", "0",
		// Runs uploaded as they flush: the writer is killed mid-upload.
		"--spill", "off"}

	// Something gc must leave alone: the same layout under a sibling prefix.
	sibling := "durashuffle-other/" + q + "/stage-0/worker-0/attempt-old/data-0.arrows"
	if err := st.Put(ctx, sibling, []byte("not ours"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	killMidUpload(t, tg, st, prefix, append(args, "--attempt", "killed"))

	// Nothing committed: no manifest, the stage does not exist for readers,
	// and what the writer left is still there for gc.
	objs, _, _ := st.List(ctx, prefix, "")
	for _, o := range objs {
		if strings.HasSuffix(o.Key, "manifest.json") {
			t.Fatalf("a killed writer left a manifest: %s", o.Key)
		}
		if !strings.Contains(o.Key, "/worker-0/attempt-killed/data-") {
			t.Fatalf("unexpected object %s", o.Key)
		}
	}
	orphans := len(objs)
	ups, _ := st.ListUploads(ctx, prefix)
	if len(ups) == 0 || len(ups)+orphans < 2 {
		t.Fatalf("after the kill: %d uploads, %d objects; want open uploads, or an open upload and stored objects", len(ups), orphans)
	}
	r := tg.run(t, nil, "read", "-q", q, "-s", "0", "--format", "jsonl")
	if r.code != 1 || !strings.Contains(r.stderr, "stage not found") {
		t.Fatalf("read of the killed stage: exit %d\n%s", r.code, r.stderr)
	}

	// gc with a safety margin leaves young garbage alone.
	var rep gc.Report
	tg.run(t, nil, "gc", "--older-than", "1h", "--json").must(t).decode(t, &rep)
	if rep.Totals != (gc.Totals{}) {
		t.Fatalf("gc --older-than 1h removed young objects: %+v", rep.Totals)
	}
	// A dry run says what it would do and does nothing.
	tg.run(t, nil, "gc", "--older-than", "0s", "--dry-run", "--json").must(t).decode(t, &rep)
	if !rep.DryRun || rep.Totals.UploadsAborted != len(ups) || rep.Totals.OrphanObjects != orphans {
		t.Fatalf("dry run: %+v", rep.Totals)
	}
	if after, _ := st.ListUploads(ctx, prefix); len(after) != len(ups) {
		t.Fatalf("dry run aborted uploads: %d left of %d", len(after), len(ups))
	}
	human := tg.run(t, nil, "gc", "--older-than", "0s", "--dry-run").must(t).stdout
	t.Logf("gc --older-than 0s --dry-run:\n%s", human)
	if !strings.Contains(human, "dry run: nothing was removed") || !strings.Contains(human, fmt.Sprintf("would abort %d incomplete multipart uploads", len(ups))) {
		t.Fatalf("dry run output:\n%s", human)
	}

	tg.run(t, nil, "gc", "--older-than", "0s", "--json").must(t).decode(t, &rep)
	if rep.DryRun || rep.Totals.UploadsAborted != len(ups) || rep.Totals.OrphanObjects != orphans || (orphans > 0) != (rep.Totals.OrphanBytes > 0) {
		t.Fatalf("gc: %+v", rep.Totals)
	}
	t.Logf("gc after SIGKILL: aborted %d uploads, deleted %d orphan objects (%d bytes)", rep.Totals.UploadsAborted, rep.Totals.OrphanObjects, rep.Totals.OrphanBytes)
	if after, _ := st.ListUploads(ctx, ""); len(after) != 0 {
		t.Fatalf("uploads left after gc: %v", after)
	}
	if left, _, _ := st.List(ctx, prefix, ""); len(left) != 0 {
		t.Fatalf("objects left after gc: %v", left)
	}
	if all, _, _ := st.List(ctx, "", ""); len(all) != 1 || all[0].Key != sibling {
		t.Fatalf("bucket after gc: %v, want only %s", all, sibling)
	}

	// The worker's rerun, with a new attempt, commits and reads back whole.
	batches := crashInput()
	defer func() {
		for _, b := range batches {
			b.Release()
		}
	}()
	var in bytes.Buffer
	w := ipc.NewWriter(&in, ipc.WithSchema(blobSchema))
	var want []string
	for _, b := range batches {
		if err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want = rowDigests(t, in.Bytes())
	var ws writeSummary
	tg.run(t, in.Bytes(), append(append(args, "--attempt", "rerun"), "--json")...).must(t).decode(t, &ws)
	if !ws.Committed || ws.Rows != int64(len(want)) || ws.Objects < 3 {
		t.Fatalf("rerun: %+v", ws)
	}
	got := rowDigests(t, []byte(tg.run(t, nil, "read", "-q", q, "-s", "0").must(t).stdout))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read back %d rows, want %d equal rows", len(got), len(want))
	}
	if after, _ := st.ListUploads(ctx, ""); len(after) != 0 {
		t.Fatalf("uploads left after the rerun: %v", after)
	}
}

// TestDeleteQueryCLI removes a committed query and nothing else.
func TestDeleteQueryCLI(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[0])
	in := arrowStream(t, testBatches(t, 0, 500, 100))
	for _, q := range []string{"gone", "kept"} {
		tg.run(t, in, "write", "-q", q, "-w", "0", "--partitions", "2", "--partition-by", "id").must(t)
		tg.run(t, nil, "seal", "-q", q, "--workers", "1").must(t)
	}
	var rep gc.Report
	tg.run(t, nil, "delete-query", "-q", "gone", "--json").must(t).decode(t, &rep)
	if rep.Query != "gone" || rep.Totals.StagesDeleted != 1 || rep.Totals.ObjectsDeleted != 4 { // stage manifest, index, worker manifest, data
		t.Fatalf("delete-query: %+v", rep.Totals)
	}
	if r := tg.run(t, nil, "read", "-q", "gone", "--format", "jsonl"); r.code != 1 || !strings.Contains(r.stderr, "stage not found") {
		t.Fatalf("read after delete-query: exit %d\n%s", r.code, r.stderr)
	}
	if n := len(jsonLinesOf(t, tg.run(t, nil, "read", "-q", "kept", "--format", "jsonl").must(t).stdout)); n != 500 {
		t.Fatalf("the other query reads %d rows, want 500", n)
	}
	out := tg.run(t, nil, "delete-query", "-q", "gone").must(t).stdout
	if !strings.Contains(out, "deleted query gone: 0 stages, 0 objects") {
		t.Fatalf("second delete-query:\n%s", out)
	}
}
