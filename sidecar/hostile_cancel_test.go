package sidecar_test

import (
	"context"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestHostileCancelEveryStep: a client that cancels a DoPut once its
// descriptor and schema are in, after some batches, or a DoGet after its
// first batch, gets its call ended; nothing of a cancelled put is left
// (no manifest, no object, no open upload), no slot stays held, a
// committed worker reads back unchanged, and the next put commits. (A
// cancel around the commit message is TestHalfCloseThenCancel's.)
func TestHostileCancelEveryStep(t *testing.T) {
	forEveryBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{cfg: uploading})
		want := putRows(t, e, "q-kept", "0", 10, 2)
		if _, err := e.sc.Seal(context.Background(), "q-kept", 0, 1); err != nil {
			t.Fatal(err)
		}
		noSlotHeld := func(after string) {
			t.Helper()
			waitFor(t, "no stream slot held after "+after, func() bool {
				return sum(scrape(t, e.httpURL), metrics.SidecarStreams, nil) == 0
			})
		}
		for _, step := range []struct {
			name    string
			batches int // sent before the cancel
		}{{"after the schema", 0}, {"after 30 batches", 30}} {
			query := "q-cancel"
			worker := "w" + string(rune('a'+step.batches%26))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			pw, err := e.sc.Put(ctx, flightclient.PutCommand{Query: query, Worker: flightclient.WorkerID(worker), Partitions: 2}, testSchema)
			if err != nil {
				cancel()
				t.Fatalf("%s: %v", step.name, err)
			}
			for b := range step.batches {
				rec, _ := genBatch(worker, int32(b), 2000, 64)
				err := pw.Write(b%2, rec)
				rec.Release()
				if err != nil {
					cancel()
					t.Fatalf("%s: batch %d: %v", step.name, b, err)
				}
			}
			cancel()
			if _, err := pw.Commit(); err == nil {
				t.Fatalf("%s: the cancelled put committed", step.name)
			}
			e.nothingLeft(query, 0, worker)
			noSlotHeld(step.name)
		}

		// A DoGet cancelled after its first batch.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p := 0
		r, err := e.sc.Get(ctx, flightclient.Ticket{Query: "q-kept", Stage: 0, Partition: &p})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if !r.Next() {
			cancel()
			t.Fatalf("the DoGet delivered no batch: %v", r.Err())
		}
		cancel()
		for r.Next() {
		}
		r.Release()
		noSlotHeld("the cancelled DoGet")

		// The process serves on, and committed bytes read back unchanged.
		readsBack(t, e, "q-kept", want)
		next := putRows(t, e, "q-next", "0", 4, 2)
		if _, err := e.sc.Seal(context.Background(), "q-next", 0, 1); err != nil {
			t.Fatal(err)
		}
		readsBack(t, e, "q-next", next)
	})
}
