package e2e_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

// heapSampler records the most heap in use, after a GC, while it runs:
// live memory, not garbage waiting for the collector.
type heapSampler struct {
	peak atomic.Uint64
	live atomic.Uint64
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
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if v := live[0].Value.Uint64(); v > h.live.Load() {
		h.live.Store(v)
	}
}

// Live is the most heap the collector found live (marked) at the end of
// a cycle: what the program holds, without the garbage other goroutines
// allocate between the collection and the reading of HeapInuse.
func (h *heapSampler) Live() uint64 { return h.live.Load() }

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
	// Spill off: runs go to the pool's chunk buffers as they flush,
	// which is what the bound holds (a spilled writer's object is
	// uploaded from its file at Commit and takes no chunk buffer).
	cfg := uploadingConfig()
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Write.UploadConcurrency = 4
	cfg.Write.MaxBufferedChunks = 8
	cfg.Write.FrameTargetBytes = 64 * durashuffle.KiB
	cfg.Write.CoalesceBudget = 256 * durashuffle.KiB
	cfg.Hedge.Factor = 0
	c := testenv.Client(t, cfg, durashuffle.WithStore(slowStore{st, 100 * time.Millisecond}), durashuffle.WithCounter(counter))
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
	perWriter := int64(cfg.Write.CoalesceBudget) + partitions*batchRows<<10 +
		int64(3*cfg.Encoders()+1)*(4*int64(cfg.Write.FrameTargetBytes)+batchRows<<10)
	bound := uint64(int64(cfg.Write.MaxBufferedChunks)*int64(cfg.Write.ChunkSize) + writers*perWriter + 64<<20)

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
	stats := c.Stats()
	grew := peakHeap - min(base, peakHeap)
	t.Logf("16 writers, 256 MiB in %v (%d parts, %d UploadPart requests): peak %d of %d chunk buffers; heap in use after GC peaked at %.1f MiB (%.1f MiB over the %.1f MiB before), bound %.1f MiB",
		elapsed.Round(time.Millisecond), counter.Requests()["UploadPart"]+counter.Requests()["PutObject"]-writers, counter.Requests()["UploadPart"],
		stats.PeakBuffered, cfg.Write.MaxBufferedChunks, float64(peakHeap)/(1<<20), float64(grew)/(1<<20), float64(base)/(1<<20), float64(bound)/(1<<20))
	if stats.PeakBuffered > int64(cfg.Write.MaxBufferedChunks) || stats.PeakBuffered < int64(cfg.Write.MaxBufferedChunks)/2 {
		t.Fatalf("peak %d chunk buffers: want at most %d, and the slow link should have filled most of them", stats.PeakBuffered, cfg.Write.MaxBufferedChunks)
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

// TestLoadWideStageBoundedMemory: 4 writers of 4,096 partitions each, fed
// as a wide shuffle's map side feeds them (every 8,192-row input batch
// split across the partitions: 2 rows per Write), to MinIO. The live heap
// stays under the bound the configuration promises however many
// partitions there are; each writer's frames come in sorted runs, about
// one frame per partition per run, not one per Write; and every row
// reads back.
func TestLoadWideStageBoundedMemory(t *testing.T) {
	ctx := context.Background()
	st, counter := testenv.MinIO(t).NewStore(t)
	cfg := testConfig()
	cfg.Write.CoalesceBudget = 8 * durashuffle.MiB
	cfg.Hedge.Factor = 0
	c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
	defer c.Close()
	const (
		writers    = 4
		partitions = 4096
		rows       = 100_000 // per writer: some 17 MiB of lineitem rows
	)
	// The bound is the one the configuration promises for this load
	// (MemoryBound): the chunk buffers, each writer's coalesce_budget
	// (the partitions' state, the arena, retained rows and index entries
	// are all counted in it), and runtimeHeadroom for everything else
	// (here also the test's own input batches; the SDK's, TLS's and
	// the streamed parts' request state; the encoders' buffers). The
	// live heap alone is held to it, so what lies outside the heap has
	// room too. Measured on MinIO over HTTPS: 110 to 122 MiB of 158.
	bound := uint64(cfg.MemoryBound(durashuffle.MemoryLoad{Writers: writers}))

	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	base := live[0].Value.Uint64()
	heap := sampleHeap(20 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make([]error, writers)
	manifests := make([]*manifest.Worker, writers)
	for wi := range writers {
		wg.Go(func() {
			w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "wide", Worker: fmt.Sprint(wi), Partitions: partitions, Schema: demo.Schema()})
			if err != nil {
				errs[wi] = err
				return
			}
			b, err := demo.NewBatcher(demo.Generator{Seed: uint64(wi)}, partitions, nil)
			if err != nil {
				errs[wi] = err
				return
			}
			defer b.Release()
			for _, r := range demo.Chunks(demo.Range{Lo: int64(wi) * rows, Hi: int64(wi+1) * rows}, 8192) {
				for _, p := range b.Batch(r, nil) {
					if err == nil {
						err = w.Write(p.Partition, p.Record)
					}
					p.Record.Release()
				}
				if err != nil {
					errs[wi] = err
					w.Abort()
					return
				}
			}
			manifests[wi], errs[wi] = w.Commit(ctx)
		})
	}
	wg.Wait()
	heap.Stop()
	peakHeap := heap.Live()
	for wi, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", wi, err)
		}
	}
	grew := peakHeap - min(base, peakHeap)
	var frames, logical, stored int64
	for _, m := range manifests {
		frames += int64(len(m.Frames))
		logical += m.Totals.BytesLogical
		stored += m.Totals.BytesStored
	}
	// Sorted runs: a writer's rows are flushed when its budget fills, so
	// it has about logical/budget runs, each with at most one frame per
	// partition (2 rows per Write would otherwise be 12 frames each).
	runs := logical/writers/int64(cfg.Write.CoalesceBudget) + 2
	t.Logf("%d writers x %d partitions: %d frames, %.1f MiB logical; live heap grew by %.1f MiB, bound %.1f MiB",
		writers, partitions, frames, float64(logical)/(1<<20), float64(grew)/(1<<20), float64(bound)/(1<<20))
	if grew > bound {
		t.Fatalf("live heap grew by %d bytes, over the bound of %d", grew, bound)
	}
	// A frame costs its rows, one batch's metadata and 8 bytes, not a
	// schema and a compression frame per buffer: at some 1.6 KiB of rows
	// per frame, lineitem stores in 0.90 of its logical bytes (format
	// 1.0's per-frame IPC streams took about twice its logical bytes at
	// this size, 1.09 at 5.8 KiB and 4.2 at 4 rows).
	t.Logf("stored %.1f MiB: %.3f of the logical bytes, %.1f bytes per row", float64(stored)/(1<<20), float64(stored)/float64(logical), float64(stored)/float64(writers*rows))
	if stored > logical {
		t.Fatalf("stored %d bytes for %d logical: per-frame overhead dominates", stored, logical)
	}
	if max := writers * runs * partitions; frames > max {
		t.Fatalf("%d frames: more than %d runs x %d partitions per writer (%d)", frames, runs, partitions, max)
	}
	if _, err := c.Seal(ctx, "wide", 0, writers); err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenStage(ctx, "wide", 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.ReadStored(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	n := 0
	for recs.Next() {
		keys := recs.RecordBatch().Column(0).(*array.Int64)
		for i := range keys.Len() {
			n++
			if p := demo.PartitionOf(keys.Value(i), partitions); p != recs.Partition() {
				t.Fatalf("order key %d in partition %d, want %d", keys.Value(i), recs.Partition(), p)
			}
		}
	}
	if err := recs.Err(); err != nil || n != writers*rows {
		t.Fatalf("read %d rows of %d: %v", n, writers*rows, err)
	}
}
