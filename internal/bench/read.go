package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/store"
)

// readDurashuffle reads every partition of the stage back the way the
// next stage's workers would: Readers partitions at a time, each a stream
// of its own, every record decoded (and its CRC32C checked) and counted.
func readDurashuffle(ctx context.Context, j *Job) (*Result, error) {
	raw, counter, tr, err := openStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	client := durashuffle.NewClient(raw, j.Config, counter, nil)
	defer client.Close()
	res := &Result{Name: j.Name}
	var rows, logical, ranges atomic.Int64
	before := counter.Requests()
	start := time.Now()
	st, err := client.OpenStage(ctx, j.Query, 0)
	if err != nil {
		return nil, err
	}
	parts := st.Manifest().Partitions
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, j.Readers))
	for p := range parts {
		g.Go(func() error {
			rr, err := st.ReadPartitions(gctx, []int{p})
			if err != nil {
				return err
			}
			defer rr.Close()
			ranges.Add(int64(rr.Ranges()))
			for rr.Next() {
				rec := rr.RecordBatch()
				rows.Add(rec.NumRows())
				logical.Add(frame.LogicalSize(rec))
			}
			if err := rr.Err(); err != nil {
				return fmt.Errorf("partition %d: %w", p, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	res.Requests = store.Diff(counter.Requests(), before)
	t := st.Manifest().Totals
	res.StoredBytes = t.BytesStored
	res.LogicalBytes = logical.Load()
	res.Rows = rows.Load()
	res.Frames = t.Frames
	res.Objects = t.Objects
	res.RangedGets = ranges.Load()
	res.ManifestGets = res.Requests["GetObject"] - res.RangedGets
	if res.Rows != t.Rows {
		return nil, fmt.Errorf("read %d rows, the stage has %d", res.Rows, t.Rows)
	}
	res.finish(elapsed)
	return res, nil
}
