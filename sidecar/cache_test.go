package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// getCounter counts GETs per key.
type getCounter struct {
	store.Store
	mu   sync.Mutex
	gets map[string]int
}

func (g *getCounter) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	g.mu.Lock()
	g.gets[key]++
	g.mu.Unlock()
	return g.Store.GetRange(ctx, key, off, length)
}

func (g *getCounter) count(suffix string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for k, v := range g.gets {
		if strings.HasSuffix(k, suffix) {
			n += v
		}
	}
	return n
}

// TestStageCache: reading every partition of a sealed stage costs one
// manifest GET in all, and a stage deleted and written again, through the
// sidecar or behind its back, is read afresh.
func TestStageCache(t *testing.T) {
	gc := &getCounter{gets: map[string]int{}}
	e := newEnv(t, testenv.Embedded(t), envOptions{wrap: func(st store.Store) store.Store { gc.Store = st; return gc }})
	ctx := context.Background()
	const query, partitions = "q-cache", 6
	write := func(tag string) [][]row {
		want := make([][]row, partitions)
		for w := range 2 {
			var bs []partBatch
			for p := range partitions {
				rec, rows := genBatch(tag, int32(w*100+p), 50, 8)
				want[p] = append(want[p], rows...)
				bs = append(bs, partBatch{p, rec})
			}
			cmd := flightclient.PutCommand{Query: query, Worker: flightclient.WorkerID(fmt.Sprint(w)), Partitions: partitions}
			if _, err := putWorker(ctx, e.sc, cmd, slices.Values(bs)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.sc.Seal(ctx, query, 0, 2); err != nil {
			t.Fatal(err)
		}
		return want
	}
	check := func(want [][]row) {
		t.Helper()
		for p := range partitions {
			_, got, err := doGet(ctx, e.fc, map[string]any{"query": query, "stage": 0, "partition": p})
			if err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
			if !slices.Equal(got, want[p]) {
				t.Fatalf("partition %d: %s", p, firstDiff(got, want[p]))
			}
		}
	}
	stageManifest := "/" + query + "/stage-0/manifest.json"

	check(write("a"))
	// One GET by the seal, which finds the stage not yet sealed, and one
	// by the first DoGet.
	if n := gc.count(stageManifest); n != 2 {
		t.Fatalf("a seal and %d DoGets made %d GETs of the stage manifest, want 2", partitions, n)
	}

	// Deleted and written again through the sidecar.
	if _, err := e.sc.DeleteQuery(ctx, query); err != nil {
		t.Fatal(err)
	}
	check(write("b"))

	// Deleted and written again behind its back, by another client.
	objs, _, err := e.raw.List(ctx, e.client.Layout().QueryPrefix(query), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := e.raw.Delete(ctx, o.Key); err != nil {
			t.Fatal(err)
		}
	}
	other := testenv.Client(t, e.cfg, durashuffle.WithStore(e.raw))
	defer other.Close()
	want := make([][]row, partitions)
	w, err := other.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Stage: 0, Worker: "0", Partitions: partitions, Schema: testSchema})
	if err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		rec, rows := genBatch("c", int32(p), 30, 8)
		want[p] = rows
		if err := w.Write(p, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if _, err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Seal(ctx, query, 0, 1); err != nil {
		t.Fatal(err)
	}
	check(want)
}
