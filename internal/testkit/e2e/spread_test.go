package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestKeySpread: with key_spread 16, each worker's data objects go under
// a shard prefix of their own ({prefix}/~{shard}/{query}/...) while the
// manifests stay under the stage; the stage reads back; gc keeps every
// object a manifest names and aborts nothing; delete-query removes the
// spread objects too and leaves the bucket empty.
func TestKeySpread(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		cfg.Write.KeySpread = 16
		c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		const workers = 8
		for wi := range workers {
			w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "spread", Worker: fmt.Sprint(wi), Partitions: 4})
			if err != nil {
				t.Fatal(err)
			}
			if err := writeRows(w, 3000, 4); err != nil {
				t.Fatal(err)
			}
			m, err := w.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range m.Objects {
				if !strings.HasPrefix(o.Key, "~") || !strings.Contains(o.Key, "/spread/stage-0/worker-"+fmt.Sprint(wi)+"/") {
					t.Fatalf("object key %q: want ~{shard}/spread/stage-0/worker-%d/...", o.Key, wi)
				}
			}
		}
		if _, err := c.Seal(ctx, "spread", 0, workers); err != nil {
			t.Fatal(err)
		}
		all, _, err := st.List(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		shards := map[string]bool{}
		for _, o := range all {
			rest := strings.TrimPrefix(o.Key, cfg.Store.Prefix+"/")
			if shard, _, ok := manifest.ParseSpread(rest); ok {
				shards[shard] = true
			} else if !strings.HasPrefix(rest, "spread/stage-0/") || strings.HasSuffix(rest, ".arrows") {
				t.Fatalf("key %s: data outside a shard, or a manifest inside one", o.Key)
			}
		}
		if len(shards) < 3 {
			t.Fatalf("%d workers' objects in %d shard prefixes of 16", workers, len(shards))
		}
		s, err := c.OpenStage(ctx, "spread", 0)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := s.ReadPartitions(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for recs.Next() {
			n += int(recs.RecordBatch().NumRows())
		}
		if err := recs.Err(); err != nil || n != workers*3000 {
			t.Fatalf("read %d rows of %d: %v", n, workers*3000, err)
		}
		recs.Release()

		// A killed attempt's spread object: an orphan gc removes; a key
		// under a shard prefix of another shape: foreign, never touched.
		dead := cfg.Store.Prefix + "/~3/spread/stage-0/worker-0/attempt-dead/data-0.arrows"
		foreign := cfg.Store.Prefix + "/~3/spread/stage-0/notes.txt"
		for _, k := range []string{dead, foreign} {
			if err := st.Put(ctx, k, []byte("x"), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := gc.Run(ctx, st, c.Layout(), gc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Totals.ObjectsDeleted != 1 || len(rep.Orphans) != 1 || rep.Orphans[0].Key != dead || rep.Totals.UploadsAborted != 0 {
			t.Fatalf("gc deleted %d objects (orphans %v) and aborted %d uploads; want the dead attempt's object alone", rep.Totals.ObjectsDeleted, rep.Orphans, rep.Totals.UploadsAborted)
		}
		if err := st.Delete(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		if _, err := gc.DeleteQuery(ctx, st, c.Layout(), "spread"); err != nil {
			t.Fatal(err)
		}
		left, _, _ := st.List(ctx, "", "")
		ups, _ := st.ListUploads(ctx, "")
		if len(left) != 0 || len(ups) != 0 {
			t.Fatalf("after delete-query: %d objects (%v), %d uploads", len(left), left, len(ups))
		}
	})
}
