package manifest

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// The synthetic stage of the scale benchmarks: 1,000 workers x 10,000
// partitions, one frame of every partition per worker: 10 million index
// entries, 480 MB of worker manifests and as much index.
const benchWorkers, benchPartitions = 1000, 10000

var big struct {
	once sync.Once
	st   *store.Mem
	ids  []string
	err  error
	dur  time.Duration // of the first seal
}

func bigStage(b *testing.B) (*store.Mem, []string) {
	b.Helper()
	big.once.Do(func() {
		ctx := context.Background()
		st := &store.Mem{}
		ids := make([]string, benchWorkers)
		g := make(chan error, benchWorkers)
		var next atomic.Int64
		for range runtime.GOMAXPROCS(0) {
			go func() {
				for {
					w := int(next.Add(1)) - 1
					if w >= benchWorkers {
						return
					}
					ids[w] = fmt.Sprint(w)
					_, err := Commit(ctx, st, testLayout, synthWorker("big", 0, w, benchPartitions, 1))
					g <- err
				}
			}()
		}
		for range benchWorkers {
			if err := <-g; err != nil && big.err == nil {
				big.err = err
			}
		}
		if big.err != nil {
			return
		}
		start := time.Now()
		_, big.err = Seal(ctx, st, testLayout, "big", 0, ids)
		big.dur = time.Since(start)
		big.st, big.ids = st, ids
	})
	if big.err != nil {
		b.Fatal(big.err)
	}
	return big.st, big.ids
}

// BenchmarkOpenOnePartition opens the 10-million-entry stage and lists
// one partition's frames: at most 2 GETs and 1 MiB of metadata, whatever
// the stage's size.
func BenchmarkOpenOnePartition(b *testing.B) {
	st, _ := bigStage(b)
	ctx := context.Background()
	g0, b0 := st.Gets()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s, err := LoadStage(ctx, st, testLayout, "big", 0)
		if err != nil {
			b.Fatal(err)
		}
		fs, err := s.Frames(ctx, st, testLayout, []int{(i * 7919) % benchPartitions})
		if err != nil || len(fs) != benchWorkers {
			b.Fatalf("%d frames, %v", len(fs), err)
		}
	}
	b.StopTimer()
	g1, b1 := st.Gets()
	gets, moved := float64(g1-g0)/float64(b.N), float64(b1-b0)/float64(b.N)
	b.ReportMetric(gets, "GETs/op")
	b.ReportMetric(moved/(1<<10), "KiB/op")
	if gets > 2 || moved > 1<<20 {
		b.Fatalf("opening for one partition took %.1f GETs and %.0f bytes, want at most 2 and 1 MiB", gets, moved)
	}
}

// BenchmarkSeal seals the 10-million-entry stage (the index upload is
// discarded, so the store does not grow) and reports its peak heap above
// what the store holds. The GC runs at GOGC=10 meanwhile, so garbage
// does not hide in the peak; that costs seal time.
func BenchmarkSeal(b *testing.B) {
	st, ids := bigStage(b)
	b.Logf("first seal (normal GC, index stored): %v", big.dur)
	ctx := context.Background()
	mkey := testLayout.StageManifestKey("big", 0)
	orig, _ := st.Bytes(mkey)
	defer st.Set(mkey, orig)
	st.Discard = func(key string) bool { return strings.Contains(key, "/index-") }
	defer func() { st.Discard = nil }()
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var peak uint64
	g0, b0 := st.Gets()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		_ = st.Delete(ctx, mkey)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		stop := make(chan struct{})
		done := make(chan uint64)
		go func() {
			var top uint64
			t := time.NewTicker(2 * time.Millisecond)
			defer t.Stop()
			for {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				top = max(top, ms.HeapAlloc)
				select {
				case <-stop:
					done <- top
					return
				case <-t.C:
				}
			}
		}()
		b.StartTimer()
		s, err := Seal(ctx, st, testLayout, "big", 0, ids)
		b.StopTimer()
		close(stop)
		top := <-done
		if err != nil {
			b.Fatal(err)
		}
		if s.Totals.Frames != benchWorkers*benchPartitions {
			b.Fatalf("%d frames sealed", s.Totals.Frames)
		}
		if top > base {
			peak = max(peak, top-base)
		}
		b.StartTimer()
	}
	b.StopTimer()
	g1, b1 := st.Gets()
	b.ReportMetric(float64(g1-g0)/float64(b.N), "GETs/op")
	b.ReportMetric(float64(b1-b0)/float64(b.N)/(1<<20), "GET-MiB/op")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(benchWorkers*benchPartitions), "entries")
}
