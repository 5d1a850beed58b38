package e2e_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// TestMemoryStoreServesOwnWrites: a library client with a memory store
// reads what it committed from memory, with no data GET, and from the
// store once released, its frames sealed or not; a store too small for a
// worker declines it.
func TestMemoryStoreServesOwnWrites(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		for _, tc := range []struct {
			name    string
			budget  durashuffle.Size
			held    bool
			encrypt bool
		}{{"fits", 64 * durashuffle.MiB, true, false}, {"too-small", 1 * durashuffle.MiB, false, false}, {"fits-encrypted", 64 * durashuffle.MiB, true, true}} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := testConfig()
				cfg.Sidecar.MemoryStoreBytes = tc.budget
				opts := []durashuffle.Option{durashuffle.WithStore(st), durashuffle.WithCounter(counter)}
				if tc.encrypt {
					opts = append(opts, durashuffle.WithEncryptionKey(rootKey()))
				}
				c, err := durashuffle.Open(ctx, cfg, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				query := "mem-" + tc.name
				var want int64
				for wk := range 2 {
					w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: fmt.Sprint(wk), Partitions: 4, Schema: schema})
					if err != nil {
						t.Fatal(err)
					}
					for p := range 4 {
						rec := batch(wk*10000+p*1000, 1000) // ~1 MiB
						if err := w.Write(p, rec); err != nil {
							t.Fatal(err)
						}
						want += rec.NumRows()
						rec.Release()
					}
					if _, err := w.Commit(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := c.Seal(ctx, query, 0, 2); err != nil {
					t.Fatal(err)
				}
				_, _, _, held := c.MemoryHeld(query, 0)
				if (len(held) == 2) != tc.held {
					t.Fatalf("holds %d workers, want all: %v", len(held), tc.held)
				}
				stg, err := c.OpenStage(ctx, query, 0)
				if err != nil {
					t.Fatal(err)
				}
				before := counter.Requests()["GetObject"]
				rows := readAll(t, stg)
				gets := counter.Requests()["GetObject"] - before
				if rows != want {
					t.Fatalf("read %d rows, wrote %d", rows, want)
				}
				// One GET of the index's entries; data GETs only without memory.
				if tc.held && gets > 1 {
					t.Fatalf("%d GETs reading a stage held in memory, want 1 (its index)", gets)
				}
				if !tc.held && gets < 2 {
					t.Fatalf("%d GETs reading a stage not held, want its data GETs", gets)
				}
				c.MemoryRelease(query, -1)
				before = counter.Requests()["GetObject"]
				if rows := readAll(t, stg); rows != want {
					t.Fatalf("read %d rows after release, wrote %d", rows, want)
				}
				if gets := counter.Requests()["GetObject"] - before; gets < 2 {
					t.Fatalf("%d GETs after release, want the data GETs", gets)
				}
			})
		}
	})
}

func readAll(t *testing.T, stg *reader.Stage) int64 {
	t.Helper()
	recs, err := stg.ReadPartitions(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	var n int64
	for recs.Next() {
		n += recs.RecordBatch().NumRows()
	}
	if err := recs.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
