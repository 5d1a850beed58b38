package sidecar_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// TestGCActionCombinedGrace: on every backend, the gc action with a
// combined_grace keeps a combined stage's first level while its combined
// seal is younger than the grace, and deletes it (3 worker manifests, 3
// data objects and the first level's index) once older, reporting the
// cutoff; the stage then reads the same rows in the same order from the
// combined level, and what is left under it is the combined level and
// the stage manifest; the sidecar, which had the first level cached,
// serves it from the combined level. A malformed or negative combined_grace is
// InvalidArgument naming it, and deletes nothing.
func TestGCActionCombinedGrace(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b.Start(t), envOptions{})
			ctx := context.Background()
			l := e.client.Layout()
			for w := range 3 {
				wr, err := e.client.NewWriter(ctx, durashuffle.WriterOptions{Query: "gq", Stage: 0, Worker: fmt.Sprint(w), Partitions: 4})
				if err != nil {
					t.Fatal(err)
				}
				for p := range 4 {
					rec, _ := genBatch(fmt.Sprint(w), int32(p), 50, 64)
					err := wr.Write(p, rec)
					rec.Release()
					if err != nil {
						t.Fatal(err)
					}
				}
				if _, err := wr.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.sc.Seal(ctx, "gq", 0, 3); err != nil {
				t.Fatal(err)
			}
			_, want, err := doGet(ctx, e.fc, flightclient.Ticket{Query: "gq", Stage: 0})
			if err != nil || len(want) != 600 {
				t.Fatalf("read before combining: %d rows, %v", len(want), err)
			}
			// Combined by another process: the sidecar's cached stage is
			// still the first level.
			cs, err := e.client.Combine(ctx, "gq", 0, combine.Options{Groups: 3, Buckets: 2})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cs.RunAll(ctx, 2); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.Seal(ctx); err != nil {
				t.Fatal(err)
			}
			keys := func() []string {
				t.Helper()
				objs, _, err := e.raw.List(ctx, l.StagePrefix("gq", 0), "")
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, o := range objs {
					out = append(out, strings.TrimPrefix(o.Key, l.StagePrefix("gq", 0)))
				}
				return out
			}
			before := keys()

			for _, bad := range []string{"-1s", "soon"} {
				err := doAction(ctx, e.fc, flightclient.ActionGC, map[string]any{"older_than": "1h", "combined_grace": bad}, nil)
				wantCode(t, err, codes.InvalidArgument, fmt.Sprintf("gc: combined_grace %q: want a non-negative duration", bad))
			}
			if _, err := e.sc.GC(ctx, time.Hour, -time.Second); err == nil {
				t.Fatal("a negative grace from the typed client was taken")
			}
			// Younger than the grace: nothing goes.
			start := time.Now()
			r, err := e.sc.GC(ctx, time.Hour, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if r.Totals != (flightclient.GCTotals{}) {
				t.Fatalf("gc with a 24h grace right after combining: %+v %+v", r.Totals, r.Orphans)
			}
			if d := start.Add(-24 * time.Hour).Sub(r.CombinedCutoff); r.CombinedCutoff.IsZero() || d > time.Second || d < -time.Minute {
				t.Errorf("combined cutoff %v, want about 24h before %v", r.CombinedCutoff, start)
			}
			if got := keys(); !slices.Equal(got, before) {
				t.Fatalf("gc changed the stage: %v, was %v", got, before)
			}
			// Without a grace, the report names no cutoff.
			if r, err := e.sc.GC(ctx, time.Hour, 0); err != nil || !r.CombinedCutoff.IsZero() || r.Totals != (flightclient.GCTotals{}) {
				t.Fatalf("gc without a grace: %+v %v", r, err)
			}

			// Older than the grace: the first level goes.
			time.Sleep(10 * time.Millisecond)
			r, err = e.sc.GC(ctx, time.Hour, time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			var gone []string
			for _, o := range r.Orphans {
				gone = append(gone, strings.TrimPrefix(o.Key, l.StagePrefix("gq", 0)))
			}
			if r.Totals.OrphanObjects != 7 || r.Totals.StagesDeleted != 0 || len(gone) != 7 {
				t.Fatalf("gc past the grace deleted %v (%+v), want 3 worker manifests, 3 data objects and the first level's index", gone, r.Totals)
			}
			for i, k := range gone {
				if manifest := strings.HasSuffix(k, "/manifest.json") && strings.HasPrefix(k, "worker-"); manifest != (i < 3) {
					t.Fatalf("deleted %v: want the worker manifests first", gone)
				}
			}
			plan := ""
			for _, k := range keys() {
				switch {
				case k == "manifest.json" || k == combine.CombinedName:
				case strings.HasPrefix(k, "combine-"):
					p, _, _ := strings.Cut(k, "/")
					if plan != "" && p != plan {
						t.Errorf("keys of two plans left: %s and %s", plan, p)
					}
					plan = p
				default:
					t.Errorf("%s is left after the first level's grace", k)
				}
			}
			missing := e.counter.Statuses()[store.OpStatus{Op: "GetObject", Status: 404}]
			_, got, err := doGet(ctx, e.fc, flightclient.Ticket{Query: "gq", Stage: 0})
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("read after the first level went: %d rows (want %d, the same in order): %v", len(got), len(want), err)
			}
			// The gc action dropped the cached first level: no GET of a
			// deleted object.
			if n := e.counter.Statuses()[store.OpStatus{Op: "GetObject", Status: 404}] - missing; n != 0 {
				t.Errorf("the read after gc made %d GETs of missing objects", n)
			}
		})
	}
}
