package bench

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/reader"
)

// readDurashuffle reads every partition of the stage back, every record
// decoded (and its CRC32C checked) and counted. As Durashuffle it is one
// stream in storage order (Stage.ReadStored: the whole stage, read_ahead
// GETs of read_range_bytes in flight), as a consumer that does not need
// partition order reads; as DurashuffleByPartition it is the way a next
// stage's workers read their partitions: Readers partitions at a time,
// each a stream of its own (Stage.ReadPartitions).
func readDurashuffle(ctx context.Context, j *Job) (*Result, error) {
	raw, counter, tr, err := openStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	client, err := durashuffle.Open(ctx, j.Config, durashuffle.WithStore(raw), durashuffle.WithCounter(counter))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	res := &Result{Name: j.Name}
	var rows, logical, ranges atomic.Int64
	before := counter.Requests()
	start := startClock()
	st, err := client.OpenStage(ctx, j.Query, 0)
	if err != nil {
		return nil, err
	}
	drain := func(rr *reader.Records, what string) error {
		ranges.Add(int64(rr.Ranges()))
		return drainRecords(rr, &rows, &logical, what)
	}
	if j.Name == Durashuffle || j.Name == DurashuffleEncrypted {
		rr, err := st.ReadStored(ctx, nil)
		if err != nil {
			return nil, err
		}
		if err := drain(rr, "stage"); err != nil {
			return nil, err
		}
	} else {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(max(1, j.Readers))
		for p := range st.Manifest().Partitions {
			g.Go(func() error {
				rr, err := st.ReadPartitions(gctx, []int{p})
				if err != nil {
					return err
				}
				return drain(rr, fmt.Sprintf("partition %d", p))
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	}
	elapsed := stopClock(start)
	res.Requests = reqs.Diff(counter.Requests(), before)
	t := st.Manifest().Totals
	res.StoredBytes = t.BytesStored
	res.LogicalBytes = logical.Load()
	res.Rows = rows.Load()
	res.Frames = t.Frames
	res.Objects = t.Objects
	res.RangedGets = ranges.Load()
	res.ManifestGets = res.Requests[getOp(StoreKind(j.Config))] - res.RangedGets
	if res.Rows != t.Rows {
		return nil, fmt.Errorf("read %d rows, the stage has %d", res.Rows, t.Rows)
	}
	res.finish(elapsed)
	return res, nil
}
