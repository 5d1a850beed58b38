package chunker

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/store"
)

// discardSink gives out objects that copy their bytes into one reused
// chunk buffer and keep nothing.
type discardSink struct {
	buf []byte
}

func newDiscardSink(chunk int64, _ int) *discardSink {
	return &discardSink{buf: make([]byte, chunk)}
}

func (s *discardSink) Create(int64, bool, func()) (Object, error) { return s, nil }

func (s *discardSink) Limit(onDisk bool) int64 {
	if onDisk {
		return 0
	}
	return int64(len(s.buf)) * store.MaxParts
}

func (s *discardSink) Write(p []byte) error {
	for len(p) > 0 {
		p = p[copy(s.buf, p):]
	}
	return nil
}

func (s *discardSink) WriteSection(Section) error { return errors.New("discardSink takes no sections") }
func (s *discardSink) Finish() error              { return nil }
func (s *discardSink) Abort()                     {}

// benchInput is rows of the demo's lineitem table, one record per
// partition, to be written as slices of n rows.
func benchInput(b *testing.B, partitions, rowsPerPartition int) []arrow.RecordBatch {
	b.Helper()
	bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, partitions, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Release()
	recs := make([]arrow.RecordBatch, partitions)
	for _, p := range bt.Batch(demo.Range{Lo: 0, Hi: int64(partitions * rowsPerPartition)}, nil) {
		recs[p.Partition] = p.Record
	}
	return recs
}

// BenchmarkWrite measures the chunker's Write throughput (coalesce,
// encode with LZ4, append, cut into 8 MiB chunks) in logical bytes per
// second, with input batches of 128 and 8192 rows, from 1 and 2
// goroutines. cpu-ns/op is the process's CPU time (every goroutine, the
// garbage collector's too) per op: on a machine shared with other work
// it compares the two batch sizes where wall time cannot.
func BenchmarkWrite(b *testing.B) {
	const partitions = 16
	input := benchInput(b, partitions, 16384)
	defer func() {
		for _, r := range input {
			r.Release()
		}
	}()
	for _, rows := range []int64{128, 8192} {
		// One pass over every partition's rows, as slices of rows.
		type write struct {
			p   int
			rec arrow.RecordBatch
		}
		var writes []write
		var logical int64
		for p, r := range input {
			for lo := int64(0); lo < r.NumRows(); lo += rows {
				s := r.NewSlice(lo, min(lo+rows, r.NumRows()))
				writes = append(writes, write{p, s})
				logical += frame.LogicalSize(s)
			}
		}
		for _, goroutines := range []int{1, 2} {
			b.Run(fmt.Sprintf("batch=%d/writers=%d", rows, goroutines), func(b *testing.B) {
				b.SetBytes(logical)
				b.ReportAllocs()
				cpu0 := cpuTime(b)
				for b.Loop() {
					w, err := New(context.Background(), Options{
						Schema: demo.Schema(), Partitions: partitions, FrameTargetBytes: 1 << 20,
						CoalesceBudget: 64 << 20, Encoders: goroutines, Compression: frame.LZ4,
						Mem: memory.DefaultAllocator,
					}, newDiscardSink(8<<20, 4))
					if err != nil {
						b.Fatal(err)
					}
					done := make(chan error, goroutines)
					for g := range goroutines {
						go func() {
							for i := g; i < len(writes); i += goroutines {
								if err := w.Write(writes[i].p, writes[i].rec); err != nil {
									done <- err
									return
								}
							}
							done <- nil
						}()
					}
					for range goroutines {
						if err := <-done; err != nil {
							b.Fatal(err)
						}
					}
					if _, err := w.Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
		for _, wr := range writes {
			wr.rec.Release()
		}
	}
}

// cpuTime returns the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestReuseAllocatorReturnsEverything checks that the encoders' buffer
// reuse hands every buffer back to the writer's allocator by Close.
func TestReuseAllocatorReturnsEverything(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, 4, mem)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(context.Background(), Options{
		Schema: demo.Schema(), Partitions: 4, FrameTargetBytes: 256 << 10, CoalesceBudget: 1 << 20,
		Encoders: 2, Compression: frame.LZ4, Mem: mem,
	}, newDiscardSink(5<<20, 2))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range demo.Chunks(demo.Range{Lo: 0, Hi: 40000}, 1000) {
		for _, p := range bt.Batch(r, nil) {
			if err := w.Write(p.Partition, p.Record); err != nil {
				t.Fatal(err)
			}
			p.Record.Release()
		}
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 40000 || len(res.Frames) < 8 {
		t.Fatalf("wrote %d rows in %d frames", res.Rows, len(res.Frames))
	}
	bt.Release()
	mem.AssertSize(t, 0)
}

// TestReuseClass: a new buffer is rounded up by at most an eighth, and a
// buffer freed by one frame serves the next frame's slightly larger
// column.
func TestReuseClass(t *testing.T) {
	for n := reuseMin; n < 4<<20; n += n/7 + 1 {
		if c := reuseClass(n); c < n || c > n+n/8 {
			t.Fatalf("reuseClass(%d) = %d, want [%d, %d]", n, c, n, n+n/8)
		}
	}
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	a := &reuseAllocator{parent: mem}
	b := a.Allocate(47_000)
	a.Free(b)
	if c := a.Allocate(48_000); &c[0] != &b[0] {
		t.Fatal("a 48000-byte request did not reuse the freed 47000-byte buffer")
	} else {
		a.Free(c)
	}
	a.release()
	mem.AssertSize(t, 0)
}

// wideInput is rows [0, rows) of the demo's lineitem table as a map task
// of a wide shuffle hands them over: every 8192-row batch split across
// the partitions. It returns the parts and their logical bytes.
func wideInput(b *testing.B, partitions int, rows int64) ([]demo.Part, int64) {
	b.Helper()
	bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, partitions, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Release()
	var parts []demo.Part
	var logical int64
	for _, r := range demo.Chunks(demo.Range{Lo: 0, Hi: rows}, 8192) {
		for _, p := range bt.Batch(r, nil) {
			parts = append(parts, p)
			logical += frame.LogicalSize(p.Record)
		}
	}
	return parts, logical
}

// writeParts writes parts through a writer of o on a discarding sink
// and returns its Result and the bytes of its objects.
func writeParts(b *testing.B, o Options, parts []demo.Part) (Result, int64) {
	w, err := New(context.Background(), o, newDiscardSink(8<<20, 4))
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range parts {
		if err := w.Write(p.Partition, p.Record); err != nil {
			b.Fatal(err)
		}
	}
	res, err := w.Close()
	if err != nil {
		b.Fatal(err)
	}
	var stored int64
	for _, obj := range res.Objects {
		stored += obj.Size
	}
	return res, stored
}

// BenchmarkWriteWide writes the way a map task of a wide shuffle does:
// every input batch of 8192 rows split across the partitions, so that at
// 2048 partitions each Write carries 4 rows. MB/s is logical bytes.
func BenchmarkWriteWide(b *testing.B) {
	for _, partitions := range []int{64, 2048} {
		parts, logical := wideInput(b, partitions, 400_000)
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			b.SetBytes(logical)
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			var frames int
			for b.Loop() {
				res, stored := writeParts(b, Options{
					Schema: demo.Schema(), Partitions: partitions, FrameTargetBytes: 1 << 20,
					CoalesceBudget: 32 << 20, Encoders: 2, Compression: frame.LZ4,
					Mem: memory.DefaultAllocator,
				}, parts)
				frames = len(res.Frames)
				b.ReportMetric(float64(stored)/float64(logical), "stored/logical")
			}
			b.ReportMetric(float64(frames), "frames")
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
		for _, p := range parts {
			p.Record.Release()
		}
	}
}

// BenchmarkValidateBatch measures validateBatch alone (what Write checks
// of every batch before it takes it) on BenchmarkWrite's inputs (slices of
// 128 and 8192 rows) and BenchmarkWriteWide's at 2048 partitions (about 4
// rows a batch). MB/s is logical bytes: comparing it with the MB/s of the
// Write benchmarks gives the share of Write's CPU time the check takes.
func BenchmarkValidateBatch(b *testing.B) {
	const partitions = 16
	input := benchInput(b, partitions, 16384)
	defer func() {
		for _, r := range input {
			r.Release()
		}
	}()
	run := func(b *testing.B, recs []arrow.RecordBatch) {
		var logical int64
		for _, r := range recs {
			logical += frame.LogicalSize(r)
		}
		b.SetBytes(logical)
		b.ReportAllocs()
		for b.Loop() {
			for _, r := range recs {
				if err := validateBatch(r); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for _, rows := range []int64{128, 8192} {
		var recs []arrow.RecordBatch
		for _, r := range input {
			for lo := int64(0); lo < r.NumRows(); lo += rows {
				recs = append(recs, r.NewSlice(lo, min(lo+rows, r.NumRows())))
			}
		}
		b.Run(fmt.Sprintf("batch=%d", rows), func(b *testing.B) { run(b, recs) })
		for _, r := range recs {
			r.Release()
		}
	}
	bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, 2048, nil)
	if err != nil {
		b.Fatal(err)
	}
	var recs []arrow.RecordBatch
	for _, r := range demo.Chunks(demo.Range{Lo: 0, Hi: 400_000}, 8192) {
		for _, p := range bt.Batch(r, nil) {
			recs = append(recs, p.Record)
		}
	}
	bt.Release()
	b.Run("wide/partitions=2048", func(b *testing.B) { run(b, recs) })
	for _, r := range recs {
		r.Release()
	}
}

// BenchmarkWriteSpill compares a sorted writer (spill on) with spill off
// at 2048 partitions, with an output about 16 times coalesce_budget: the
// sorted writer spills 15 runs and merges every partition's pieces at
// Close. cpu-ns/op is the CPU of the whole write, Close included;
// compare the two in one run.
func BenchmarkWriteSpill(b *testing.B) {
	const partitions = 2048
	parts, logical := wideInput(b, partitions, 1_000_000)
	defer func() {
		for _, p := range parts {
			p.Record.Release()
		}
	}()
	budget := logical / 16
	for _, spilled := range []bool{false, true} {
		b.Run(fmt.Sprintf("spill=%v", spilled), func(b *testing.B) {
			b.SetBytes(logical)
			cpu0 := cpuTime(b)
			for b.Loop() {
				o := Options{
					Schema: demo.Schema(), Partitions: partitions, FrameTargetBytes: 1 << 20,
					CoalesceBudget: budget, Encoders: 2, Compression: frame.LZ4,
					Mem: memory.DefaultAllocator,
				}
				if spilled {
					d, err := spill.Open(b.TempDir(), 1<<40)
					if err != nil {
						b.Fatal(err)
					}
					o.Spill = d
				}
				res, stored := writeParts(b, o, parts)
				if o.Spill != nil {
					o.Spill.Close()
				}
				b.ReportMetric(float64(stored)/float64(logical), "stored/logical")
				b.ReportMetric(float64(len(res.Frames)), "frames")
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
