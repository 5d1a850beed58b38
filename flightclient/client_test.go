package flightclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
)

// TestGC: the typed report of a gc that deletes an expired results stage
// (the test sidecar keeps results for 0 s) and leaves a young
// intermediate stage of the same query alone; a second gc finds nothing,
// and a negative older_than is InvalidArgument.
func TestGC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := flightclient.Dial(sidecarAddr, flightclient.Options{Token: sidecarToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.PrimitiveTypes.Int64}}, nil)
	put := func(stage int, results bool) *flightclient.PutResult {
		t.Helper()
		w, err := c.Put(ctx, flightclient.PutCommand{Query: "q-gc", Stage: stage, Worker: "0", Partitions: 1, Results: results}, schema)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
		rec := b.NewRecordBatch()
		defer rec.Release()
		if err := w.Write(0, rec); err != nil {
			t.Fatal(err)
		}
		res, err := w.Commit()
		if err != nil {
			t.Fatalf("stage %d: %v", stage, err)
		}
		return res
	}
	put(0, false)
	results := put(1, true)

	rep, err := c.GC(ctx, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.DryRun || rep.Now.Sub(rep.Cutoff) != time.Hour || rep.ResultsCutoff != rep.Now || rep.Scanned.Stages < 2 {
		t.Fatalf("gc report: dry run %v, now %v, cutoff %v, results cutoff %v, scanned %+v; want a run with cutoffs 1h and 0s before now over at least 2 stages",
			rep.DryRun, rep.Now, rep.Cutoff, rep.ResultsCutoff, rep.Scanned)
	}
	if len(rep.Stages) != 1 || rep.Totals.StagesDeleted != 1 || rep.Totals.UploadsAborted != 0 || rep.Totals.OrphanObjects != 0 {
		t.Fatalf("gc deleted stages %+v, totals %+v; want only the results stage q-gc 1", rep.Stages, rep.Totals)
	}
	if s := rep.Stages[0]; s.Query != "q-gc" || s.Stage != 1 || !s.Results || s.Objects != results.Objects || s.Manifests < 1 || s.Bytes < results.BytesStored {
		t.Fatalf("deleted stage %+v; want q-gc stage 1, results, its %d data objects of %d bytes and its manifest", s, results.Objects, results.BytesStored)
	}
	if rep.Totals.ObjectsDeleted != rep.Stages[0].Objects+rep.Stages[0].Manifests || rep.Totals.BytesDeleted != rep.Stages[0].Bytes {
		t.Fatalf("totals %+v do not sum the deleted stage %+v", rep.Totals, rep.Stages[0])
	}
	if _, err := c.Get(ctx, flightclient.Ticket{Query: "q-gc", Stage: 1}); status.Code(err) != codes.NotFound {
		t.Fatalf("get of the deleted results stage: %v, want NotFound", err)
	}
	r, err := c.Get(ctx, flightclient.Ticket{Query: "q-gc", Stage: 0})
	if err != nil {
		t.Fatalf("get of the intermediate stage: %v", err)
	}
	var rows int64
	for r.Next() {
		rows += r.RecordBatch().NumRows()
	}
	if err := r.Err(); err != nil || rows != 3 {
		t.Fatalf("intermediate stage after gc: %d rows (%v), want 3", rows, err)
	}
	r.Release()

	if again, err := c.GC(ctx, time.Hour, 0); err != nil || again.Totals != (flightclient.GCTotals{}) {
		t.Fatalf("second gc: %+v, %v; want nothing removed", again, err)
	}
	_, err = c.GC(ctx, -time.Second, 0)
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || s.Message() != `gc: older_than "-1s": want a non-negative duration such as 6h` {
		t.Fatalf("gc with a negative older_than: %v, want InvalidArgument naming it", err)
	}
	if _, err := c.DeleteQuery(ctx, "q-gc"); err != nil {
		t.Fatal(err)
	}
}
