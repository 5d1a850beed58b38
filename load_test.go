package durashuffle_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/config"
	"github.com/durashuffle/durashuffle/internal/testenv"
)

// heapSampler records the most heap in use, after a GC, while it runs:
// live memory, not garbage waiting for the collector.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func sampleHeap(every time.Duration) *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			h.sample()
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) sample() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > h.peak.Load() {
		h.peak.Store(ms.HeapInuse)
	}
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	return h.peak.Load()
}

// TestLoadSixteenWritersBoundedMemory: 16 writers in one process share one
// pool with max_buffered_chunks 8 over a slow link (every part upload
// waits 100 ms before it is sent) to MinIO, writing 256 MiB of
// incompressible rows in all, far more than the pool holds. The pool never
// holds more than 8 chunks, the live heap stays under the bound the
// configuration promises, every writer commits, and every row reads back.
func TestLoadSixteenWritersBoundedMemory(t *testing.T) {
	ctx := context.Background()
	st, counter := testenv.MinIO(t).NewStore(t)
	cfg := testConfig()
	cfg.ChunkSize = 5 * config.MiB
	cfg.UploadConcurrency = 4
	cfg.MaxBufferedChunks = 8
	cfg.FrameTargetBytes = 64 * config.KiB
	cfg.CoalesceBudget = 256 * config.KiB
	cfg.HedgeFactor = 0
	c := durashuffle.NewClient(slowStore{st, 100 * time.Millisecond}, cfg, counter, nil)
	defer c.Close()
	const (
		writers    = 16
		rows       = 16 << 10 // 1 KiB each: 16 MiB per writer
		batchRows  = 64       // 64 KiB input batches
		partitions = 8
	)
	// The bound. Chunk buffers: max_buffered_chunks x chunk_size. Per
	// writer: coalesce_budget of buffered rows, which pin the input
	// batches they are slices of (one 64 KiB batch per partition at
	// most), plus frames queued, encoding and waiting to be appended (3
	// per encoder and one in the appender), each pinning its rows and
	// holding its encoded copy. Then 64 MiB for everything else: the test's
	// own batches, the SDK, HTTP buffers, the runtime, and the heap's
	// fragmentation (HeapInuse counts whole spans). An encoded frame's
	// buffer grows by doubling, to 2 x frame_target_bytes, and idle ones
	// wait in a sync.Pool that a GC only empties on its second pass: each
	// frame in flight is charged twice that.
	perWriter := int64(cfg.CoalesceBudget) + partitions*batchRows<<10 +
		int64(3*cfg.Encoders()+1)*(4*int64(cfg.FrameTargetBytes)+batchRows<<10)
	bound := uint64(int64(cfg.MaxBufferedChunks)*int64(cfg.ChunkSize) + writers*perWriter + 64<<20)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	heap := sampleHeap(50 * time.Millisecond)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for wi := range writers {
		wg.Go(func() {
			w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "load", Worker: fmt.Sprint(wi), Partitions: partitions})
			if err != nil {
				errs[wi] = err
				return
			}
			for lo := 0; lo < rows; lo += batchRows {
				rec := batch(wi*rows+lo, batchRows)
				err := w.Write((lo/batchRows)%partitions, rec)
				rec.Release()
				if err != nil {
					errs[wi] = err
					w.Abort()
					return
				}
			}
			_, errs[wi] = w.Commit(ctx)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	peakHeap := heap.Stop()
	for wi, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", wi, err)
		}
	}
	stats := c.Pool().Stats()
	grew := peakHeap - min(base, peakHeap)
	t.Logf("16 writers, 256 MiB in %v (%d parts, %d UploadPart requests): peak %d of %d chunk buffers; heap in use after GC peaked at %.1f MiB (%.1f MiB over the %.1f MiB before), bound %.1f MiB",
		elapsed.Round(time.Millisecond), counter.Requests()["UploadPart"]+counter.Requests()["PutObject"]-writers, counter.Requests()["UploadPart"],
		stats.PeakBuffered, cfg.MaxBufferedChunks, float64(peakHeap)/(1<<20), float64(grew)/(1<<20), float64(base)/(1<<20), float64(bound)/(1<<20))
	if stats.PeakBuffered > int64(cfg.MaxBufferedChunks) || stats.PeakBuffered < int64(cfg.MaxBufferedChunks)/2 {
		t.Fatalf("peak %d chunk buffers: want at most %d, and the slow link should have filled most of them", stats.PeakBuffered, cfg.MaxBufferedChunks)
	}
	if grew > bound {
		t.Fatalf("heap in use grew by %d bytes, over the bound of %d", grew, bound)
	}
	if total := uint64(writers * rows << 10); bound > total*2/3 {
		t.Fatalf("bound %d for %d bytes written: too close to tell a bounded writer from one that keeps its output", bound, total)
	}

	// Every writer's rows read back, once.
	if _, err := c.Seal(ctx, "load", 0, writers); err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenStage(ctx, "load", 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.ReadPartitions(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	seen := make([]bool, writers*rows)
	n := 0
	for recs.Next() {
		ids := recs.RecordBatch().Column(0).(*array.Int64)
		for i := range ids.Len() {
			id := ids.Value(i)
			if id < 0 || id >= int64(len(seen)) || seen[id] {
				t.Fatalf("read id %d twice or out of range", id)
			}
			seen[id] = true
			n++
		}
	}
	if err := recs.Err(); err != nil || n != writers*rows {
		t.Fatalf("read %d rows of %d: %v", n, writers*rows, err)
	}
}
