package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

// Input kinds.
const (
	// InputPool feeds slices of a pool of pre-generated rows, so what is
	// timed is durashuffle, not the row generator (apache/datafusion-ballista#2518's
	// benchmark does the same: every case slices one batch of distinct
	// rows). The pool holds PoolRows distinct rows per partition, more
	// than a frame's worth, so no frame repeats a row and compression
	// sees what it would see on fresh rows.
	InputPool = "pool"
	// InputFresh generates every row while writing, the way the demo
	// does: processing goroutines building batches and splitting them by
	// partition. The batches are the engine's memory, which is what the
	// memory scenario must count.
	InputFresh = "fresh"
)

// Data is the data set: the demo's lineitem-like rows.
type Data struct {
	Input      string `json:"input"`
	Rows       int64  `json:"rows"`
	Partitions int    `json:"partitions"`
	// WriteRows is the rows of each Write call (pool input). With fresh
	// input it is the rows of each generated input batch, which is split
	// across the partitions as the demo does.
	WriteRows int    `json:"write_rows"`
	PoolRows  int    `json:"pool_rows"` // per partition
	Producers int    `json:"producers"` // goroutines calling Write per worker
	Workers   int    `json:"workers"`   // writers (data objects) per contender
	Seed      uint64 `json:"seed"`
}

// bytesPerRow is the demo rows' logical size, for sizing data sets by
// stored bytes before anything is encoded (measured: 176.5 B/row); the
// exact figures are always measured, never taken from here.
const bytesPerRow = 176.5

// pool is the pre-generated rows: one record batch per partition.
type pool struct {
	recs []arrow.RecordBatch
	size int64 // logical bytes

	mu     sync.Mutex
	pieces map[int64][][]piece // by Write size: [partition][k] = rows [k*n, (k+1)*n)
}

// piece is one Write's slice of a partition's pool, with its logical size.
type piece struct {
	rec  arrow.RecordBatch
	size int64
}

// piecesOf cuts every partition's pool into Writes of n rows, once per
// process, so that the timed Writes reuse the slices (a Write retains
// its batch, and the writer releases it after encoding) instead of the
// harness slicing and sizing the input on the clock. nil when the pool
// rows are not a multiple of n.
func (p *pool) piecesOf(n int64) [][]piece {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ps, ok := p.pieces[n]; ok {
		return ps
	}
	var ps [][]piece
	if rows := p.recs[0].NumRows(); n > 0 && rows%n == 0 {
		ps = make([][]piece, len(p.recs))
		for i, src := range p.recs {
			for lo := int64(0); lo < src.NumRows(); lo += n {
				rec := src.NewSlice(lo, lo+n)
				ps[i] = append(ps[i], piece{rec: rec, size: frame.LogicalSize(rec)})
			}
		}
	}
	if p.pieces == nil {
		p.pieces = map[int64][][]piece{}
	}
	p.pieces[n] = ps
	return ps
}

var (
	poolMu    sync.Mutex
	poolCache = map[[3]int64]*pool{}
)

// getPool generates (once per process) poolRows rows per partition.
func getPool(seed uint64, partitions, poolRows int) (*pool, error) {
	key := [3]int64{int64(seed), int64(partitions), int64(poolRows)}
	poolMu.Lock()
	defer poolMu.Unlock()
	if p, ok := poolCache[key]; ok {
		return p, nil
	}
	// Generate enough rows that every partition has at least poolRows,
	// in two halves on two goroutines, then cut each partition to size.
	total := int64(partitions) * int64(poolRows) * 5 / 4
	halves := demo.Ranges(total, 2)
	parts := make([][]arrow.RecordBatch, 2)
	var g errgroup.Group
	for h := range halves {
		g.Go(func() error {
			b, err := demo.NewBatcher(demo.Generator{Seed: seed}, partitions, nil)
			if err != nil {
				return err
			}
			defer b.Release()
			out := make([]arrow.RecordBatch, partitions)
			for _, pt := range b.Batch(halves[h], nil) {
				out[pt.Partition] = pt.Record
			}
			parts[h] = out
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	p := &pool{recs: make([]arrow.RecordBatch, partitions)}
	for i := range partitions {
		var recs []arrow.RecordBatch
		for h := range parts {
			if r := parts[h][i]; r != nil {
				recs = append(recs, r)
			}
		}
		merged, err := frame.Concat(demo.Schema(), recs, memory.DefaultAllocator)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			r.Release()
		}
		if merged.NumRows() < int64(poolRows) {
			return nil, fmt.Errorf("pool: partition %d got %d rows, want %d", i, merged.NumRows(), poolRows)
		}
		p.recs[i] = merged.NewSlice(0, int64(poolRows))
		merged.Release()
		p.size += frame.LogicalSize(p.recs[i])
	}
	poolCache[key] = p
	return p, nil
}

// writeFunc is one Write call of a contender.
type writeFunc func(partition int, rec arrow.RecordBatch) error

// feed writes the rows of worker w (of d.Workers) through write from
// d.Producers goroutines and returns the logical bytes written.
func feed(ctx context.Context, d Data, worker int, write writeFunc) (int64, error) {
	rows := demo.Ranges(d.Rows, max(1, d.Workers))[worker]
	switch d.Input {
	case InputFresh:
		return feedFresh(ctx, d, rows, write)
	case InputPool, "":
		p, err := getPool(d.Seed, d.Partitions, d.PoolRows)
		if err != nil {
			return 0, err
		}
		return feedPool(ctx, d, p, rows.Len(), write)
	default:
		return 0, fmt.Errorf("input %q: want pool or fresh", d.Input)
	}
}

// feedPool issues Writes of d.WriteRows rows, partitions in turn; the
// i-th Write to partition p takes the next rows of p's pool, wrapping.
func feedPool(ctx context.Context, d Data, p *pool, rows int64, write writeFunc) (int64, error) {
	n := int64(max(1, d.WriteRows))
	writes := (rows + n - 1) / n
	pieces := p.piecesOf(n)
	var next atomic.Int64
	var logical atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	const block = 64 // Writes claimed at once
	for range max(1, d.Producers) {
		g.Go(func() error {
			for {
				lo := next.Add(block) - block
				if lo >= writes {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return context.Cause(gctx)
				}
				for i := lo; i < min(lo+block, writes); i++ {
					part := int(i % int64(d.Partitions))
					src := p.recs[part]
					pr := src.NumRows()
					take := n
					if i == writes-1 {
						take = rows - i*n
					}
					off := (i / int64(d.Partitions)) * n % pr
					hi := min(off+take, pr)
					var err error
					if pieces != nil && hi-off == n {
						pc := pieces[part][off/n]
						logical.Add(pc.size)
						err = write(part, pc.rec)
					} else {
						rec := src.NewSlice(off, hi)
						logical.Add(frame.LogicalSize(rec))
						err = write(part, rec)
						rec.Release()
					}
					if err != nil {
						return fmt.Errorf("write %d rows to partition %d: %w", hi-off, part, err)
					}
				}
			}
		})
	}
	err := g.Wait()
	return logical.Load(), err
}

var (
	freshMu    sync.Mutex
	freshCache = map[[2]int]int64{}
)

// freshInputBytes is what fresh input's generators hold while writing:
// every producer of every worker has a demo.Batcher, whose builders (one
// per partition, reserved for a little over the partition's share of an
// input batch) stay allocated from batch to batch, and the batch it is
// handing over, one record per partition (at 2048 partitions the Go
// objects of 2048 small records outweigh their rows). It is measured once
// per process, before anything is timed: the live heap of one Batcher
// holding one batch of d.WriteRows rows, times the producers.
func freshInputBytes(d Data) (int64, error) {
	key := [2]int{d.Partitions, d.WriteRows}
	freshMu.Lock()
	defer freshMu.Unlock()
	one, ok := freshCache[key]
	if !ok {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b, err := demo.NewBatcher(demo.Generator{Seed: d.Seed}, d.Partitions, nil)
		if err != nil {
			return 0, err
		}
		parts := b.Batch(demo.Range{Lo: 0, Hi: int64(max(1, d.WriteRows))}, nil)
		runtime.GC()
		runtime.ReadMemStats(&after)
		for _, pt := range parts {
			pt.Record.Release()
		}
		runtime.KeepAlive(parts)
		b.Release()
		one = max(0, int64(after.HeapAlloc)-int64(before.HeapAlloc))
		freshCache[key] = one
	}
	return one * int64(max(1, d.Producers)*max(1, d.Workers)), nil
}

// feedFresh generates the rows while writing, as the demo does.
func feedFresh(ctx context.Context, d Data, rows demo.Range, write writeFunc) (int64, error) {
	batches := demo.Chunks(rows, int64(max(1, d.WriteRows)))
	var next atomic.Int64
	var logical atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range max(1, d.Producers) {
		g.Go(func() error {
			b, err := demo.NewBatcher(demo.Generator{Seed: d.Seed}, d.Partitions, nil)
			if err != nil {
				return err
			}
			defer b.Release()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(batches)) {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return context.Cause(gctx)
				}
				parts := b.Batch(batches[i], nil)
				for j, pt := range parts {
					logical.Add(frame.LogicalSize(pt.Record))
					err := write(pt.Partition, pt.Record)
					pt.Record.Release()
					if err != nil {
						for _, rest := range parts[j+1:] {
							rest.Record.Release()
						}
						return fmt.Errorf("write %d rows to partition %d: %w", pt.Record.NumRows(), pt.Partition, err)
					}
				}
			}
		})
	}
	err := g.Wait()
	return logical.Load(), err
}
