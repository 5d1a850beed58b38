package storesuite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/reader"
)

// RoundTrip writes a stage of two workers with spill on and with spill
// off, commits it and reads it back: unsealed through the worker
// manifests, then sealed, every partition alone, a set of them, all of
// them, in storage order (ReadStored) and page by page (ReadResults).
// Every read returns exactly the rows written, each with its bytes, in
// the order the reader documents; no upload is left open.
func RoundTrip(t *testing.T, tg Target) {
	for _, spill := range []string{"on", "off"} {
		t.Run("spill="+spill, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			ev := newEnv(t, tg, config(t, spill), nil)
			const q = "rt"
			wrote, err := writeStage(ctx, ev.client, q, small, false)
			if err != nil {
				t.Fatal(err)
			}
			read := func(what string, open func(*reader.Stage) (*reader.Records, error)) []row {
				t.Helper()
				s, err := ev.client.OpenStage(ctx, q, 0)
				if err != nil {
					t.Fatalf("%s: open: %v", what, err)
				}
				recs, err := open(s)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				got, err := collect(recs)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return got
			}
			all := wrote.partitionOrder(nil)
			sameRows(t, "unsealed stage, every partition", read("unsealed", func(s *reader.Stage) (*reader.Records, error) {
				return s.ReadPartitions(ctx, nil)
			}), all)

			if _, err := ev.client.Seal(ctx, q, 0, small.workers); err != nil {
				t.Fatal(err)
			}
			sameRows(t, "every partition", read("all", func(s *reader.Stage) (*reader.Records, error) {
				return s.ReadPartitions(ctx, nil)
			}), all)
			for p := range small.partitions {
				sameRows(t, fmt.Sprintf("partition %d", p), read("one", func(s *reader.Stage) (*reader.Records, error) {
					return s.ReadPartitions(ctx, []int{p})
				}), wrote.partitionOrder([]int{p}))
			}
			sameRows(t, "partitions 4 and 1", read("set", func(s *reader.Stage) (*reader.Records, error) {
				return s.ReadPartitions(ctx, []int{4, 1})
			}), wrote.partitionOrder([]int{1, 4}))

			// Storage order: worker by worker, each partition's rows
			// in write order, every row once.
			stored := read("stored", func(s *reader.Stage) (*reader.Records, error) { return s.ReadStored(ctx, nil) })
			next := map[row]int64{}
			lastW := int32(-1)
			for i, r := range stored {
				if r.W < lastW {
					t.Fatalf("ReadStored: row %d is worker %d's, after worker %d's", i, r.W, lastW)
				}
				lastW = r.W
				k := row{W: r.W, P: r.P}
				if r.Seq != next[k] {
					t.Fatalf("ReadStored: row %d is %+v, want sequence %d of worker %d partition %d", i, r, next[k], r.W, r.P)
				}
				next[k]++
			}
			if len(stored) != len(all) {
				t.Fatalf("ReadStored: %d rows, want %d", len(stored), len(all))
			}

			// Pages of results, one after the other, are the whole read.
			var paged []row
			for off := int64(0); off < int64(len(all)); off += 2500 {
				paged = append(paged, read("page", func(s *reader.Stage) (*reader.Records, error) {
					return s.ReadResults(ctx, off, 2500)
				})...)
			}
			sameRows(t, "ReadResults in pages of 2500", paged, all)

			if keys := leftovers(t, ev.direct, ""); len(keys) == 0 {
				t.Fatal("the bucket holds no object after a commit")
			}
		})
	}
}
