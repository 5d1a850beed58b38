package combine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestCombineKeySpread: with key_spread, on every backend, a combined
// level's objects are spread as the writers' are: each task manifest
// names its object under a shard prefix, every attempt's object is
// there and none under the stage's own prefix, and 16 tasks use more
// than one shard. The combined level reads back the same rows in the
// same order; gc deletes a killed attempt's spread object, then with
// --combined-grace the first level, keeping the combined objects;
// delete-query then leaves nothing under the root and no upload.
func TestCombineKeySpread(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ep := b.Start(t)
			st, counter := ep.NewStore(t)
			cfg := durashuffle.DefaultConfig()
			cfg.Store.Bucket = ep.Bucket
			cfg.Write.ChunkSize = 5 * durashuffle.MiB
			cfg.Write.UploadConcurrency = 4
			cfg.Write.KeySpread = 8
			c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
			t.Cleanup(c.Close)
			e := &env{c: c, st: st, counter: counter}
			ctx := context.Background()
			l := c.Layout()
			const W, P, G, J = 4, 4, 4, 4
			writeStage(t, e, "qs", W, P, 10, 500)
			direct, _ := readEach(t, e, "qs", P)

			cs, err := c.Combine(ctx, "qs", 0, combine.Options{Groups: G, Buckets: J})
			if err != nil {
				t.Fatal(err)
			}
			tasks, err := cs.RunAll(ctx, 4)
			if err != nil {
				t.Fatal(err)
			}
			level, err := cs.Seal(ctx)
			if err != nil {
				t.Fatal(err)
			}
			shards := map[string]bool{}
			named := map[string]bool{}
			for n, task := range tasks {
				if len(task.Manifest.Objects) != 1 {
					t.Fatalf("task %d has %d objects, want 1", n, len(task.Manifest.Objects))
				}
				rel := task.Manifest.Objects[0].Key
				shard, tail, ok := manifest.ParseSpread(rel)
				want := "qs/stage-0/" + (manifest.Layout{}).TaskDataKey("qs", 0, cs.Plan().ID, n, task.Manifest.Attempt) // unspread
				if !ok || tail != want || rel != l.TaskDataKey("qs", 0, cs.Plan().ID, n, task.Manifest.Attempt) {
					t.Fatalf("task %d's object is %q, want %s under a shard prefix", n, rel, want)
				}
				shards[shard] = true
				named[l.ObjectKey("qs", 0, rel)] = true
			}
			if len(shards) < 2 {
				t.Errorf("%d tasks' objects in %d shard prefixes of 8", G*J, len(shards))
			}
			// The combined level's stage manifest names the same keys.
			for _, w := range level.Workers {
				if !named[l.ObjectKey("qs", 0, w.Objects[0].Key)] {
					t.Errorf("the combined level names %s, which no task wrote", w.Objects[0].Key)
				}
			}
			objs, _, err := st.List(ctx, l.SpreadPrefix(), "")
			if err != nil {
				t.Fatal(err)
			}
			found := 0
			for _, o := range objs {
				if strings.Contains(o.Key, "/"+manifest.PlanDir(cs.Plan().ID)) {
					if !named[o.Key] {
						t.Errorf("spread combined object %s is named by no task", o.Key)
					}
					found++
				}
			}
			if found != len(named) {
				t.Errorf("%d combined objects under the shard prefixes, want %d", found, len(named))
			}
			under, _, err := st.List(ctx, l.StagePrefix("qs", 0)+manifest.PlanDir(cs.Plan().ID), "")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range under {
				if strings.HasSuffix(o.Key, ".arrows") {
					t.Errorf("combined object %s under the stage's prefix", o.Key)
				}
			}
			combined, _ := readEach(t, e, "qs", P)
			for i := range direct {
				if direct[i] != combined[i] {
					t.Errorf("partition %d differs combined: %+v, was %+v", i, combined[i], direct[i])
				}
			}

			// A killed attempt's spread object goes; the combined objects stay.
			stray := l.ObjectKey("qs", 0, l.TaskDataKey("qs", 0, cs.Plan().ID, 1, "00000000000000ff"))
			if err := st.Put(ctx, stray, []byte("killed attempt"), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			r, err := gc.Run(ctx, st, l, gc.Options{OlderThan: 0, ResultsRetention: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			gone := map[string]bool{}
			for _, o := range r.Orphans {
				gone[o.Key] = true
			}
			if !gone[stray] {
				t.Errorf("gc left the killed attempt's spread object %s: deleted %v", stray, r.Orphans)
			}
			for k := range named {
				if gone[k] {
					t.Errorf("gc deleted combined object %s", k)
				}
			}
			// Past the first level's grace: the writers' spread objects go.
			now := time.Now().Add(2 * time.Hour)
			r, err = gc.Run(ctx, st, l, gc.Options{OlderThan: time.Hour, ResultsRetention: 24 * time.Hour, CombinedGrace: time.Hour, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if r.Totals.OrphanObjects != 2*W { // worker manifests and data objects (the index went above)
				t.Errorf("gc past the grace deleted %d objects, want %d: %v", r.Totals.OrphanObjects, 2*W, r.Orphans)
			}
			objs, _, err = st.List(ctx, l.SpreadPrefix(), "")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if !named[o.Key] {
					t.Errorf("%s left under the shard prefixes after the first level's grace", o.Key)
				}
			}
			again, _ := readEach(t, e, "qs", P)
			for i := range direct {
				if direct[i] != again[i] {
					t.Errorf("partition %d differs once the first level is gone", i)
				}
			}

			// delete-query finds the spread combined objects too.
			dr, err := gc.DeleteQuery(ctx, st, l, "qs")
			if err != nil {
				t.Fatal(err)
			}
			if len(dr.Stages) != 1 || dr.Stages[0].Objects != G*J || dr.Scanned.Foreign != 0 {
				t.Errorf("delete-query: stages %+v, scanned %+v; want one stage of %d combined objects", dr.Stages, dr.Scanned, G*J)
			}
			if left, _, err := st.List(ctx, "", ""); err != nil || len(left) != 0 {
				t.Errorf("after delete-query: %v %v", keysOfList(left), err)
			}
			if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
				t.Errorf("uploads after delete-query: %v %v", ups, err)
			}
		})
	}
}

func keysOfList(objs []store.ObjectInfo) string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.Key)
	}
	return fmt.Sprint(ks)
}
