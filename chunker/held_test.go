package chunker

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

func TestAllocSize(t *testing.T) {
	// Go's size classes (runtime/sizeclasses.go) where the approximation
	// is exact, and pages above 32 KiB.
	for _, c := range []struct{ n, want int64 }{
		{0, 0}, {1, 16}, {16, 16}, {17, 32}, {256, 256}, {257, 288}, {300, 320},
		{1025, 1152}, {2100, 2304}, {8192, 8192}, {32768, 32768}, {32769, 40960}, {1 << 20, 1 << 20},
	} {
		if got := allocSize(c.n); got != c.want {
			t.Errorf("allocSize(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// reserved builds n rows whose builders reserved room for spare x n
// rows and 100 payload bytes per reserved row, as engines' builders do.
func reserved(n, spare int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Reserve(spare * n)
	b.Field(1).(*array.StringBuilder).ReserveData(spare * n * 100)
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append("0123456789")
	}
	return b.NewRecordBatch()
}

// occupied is what rec's buffers occupy, computed the long way.
func occupied(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		for _, b := range c.Data().Buffers() {
			if b != nil && cap(b.Buf()) > 0 {
				n += allocSize(int64(cap(b.Buf())) + allocPadding)
			}
		}
	}
	return n
}

func TestHeldPerLogical(t *testing.T) {
	t.Run("batch that owns spare capacity is charged what it occupies", func(t *testing.T) {
		rec := reserved(1000, 4)
		defer rec.Release()
		held := float64(frame.LogicalSize(rec)) * heldPerLogical(rec)
		occ := float64(occupied(rec))
		// Logical bytes: 8 + 4 + 10 per row = 22 KB; occupied: the 4000-row
		// reservation and 400 KB of string data.
		if held < 0.85*occ || held > 1.05*occ {
			t.Fatalf("charged %.0f bytes, buffers occupy %.0f", held, occ)
		}
		if held < 10*float64(frame.LogicalSize(rec)) {
			t.Fatalf("charged %.0f bytes for %d logical: spare capacity not counted", held, frame.LogicalSize(rec))
		}
	})
	t.Run("disjoint slices add up to the batch once", func(t *testing.T) {
		rec := reserved(1024, 2)
		defer rec.Release()
		whole := float64(frame.LogicalSize(rec)) * heldPerLogical(rec)
		var sum float64
		for lo := int64(0); lo < 1024; lo += 128 {
			s := rec.NewSlice(lo, lo+128)
			sum += float64(frame.LogicalSize(s)) * heldPerLogical(s)
			s.Release()
		}
		if sum < 0.95*whole || sum > 1.05*whole {
			t.Fatalf("8 slices charged %.0f bytes, the whole batch %.0f", sum, whole)
		}
	})
	t.Run("slice of an exactly sized batch is charged its logical bytes", func(t *testing.T) {
		rec := rows(memory.DefaultAllocator, 0, 100_000)
		defer rec.Release()
		exact, err := frame.Concat(schema, []arrow.RecordBatch{rec}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		defer exact.Release()
		s := exact.NewSlice(500, 628)
		defer s.Release()
		if r := heldPerLogical(s); r < 1 || r > 1.05 {
			t.Fatalf("held per logical byte of a slice of an exact batch: %.3f, want about 1", r)
		}
	})
}

// heldCounts is the writer's budget count, the sum of its parts' and
// the buffers detached so far.
func (w *Writer) heldCounts() (buffered, sum int64, runs int) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	for _, p := range w.co.parts {
		for _, f := range append(p.done, p.open) {
			sum += f.held
		}
	}
	sum += w.co.arena.Held()
	return w.co.buffered, sum, w.co.runs
}

func TestCoalesceBudgetCountsHeldBytes(t *testing.T) {
	const budget = 512 << 10
	newWriter := func(t *testing.T) *Writer {
		o := opts(8)
		o.FrameTargetBytes = budget // no partition fills a frame: only the budget flushes
		o.CoalesceBudget = budget
		w, err := New(context.Background(), o, newSink(t, testChunk, 64))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	t.Run("small batches are charged their copy, not the caller's spare capacity", func(t *testing.T) {
		w := newWriter(t)
		var logical int64
		for i := 0; ; i++ {
			rec := reserved(200, 4) // 4.4 KB logical, ~100 KB held by the caller
			logical += frame.LogicalSize(rec)
			if err := w.Write(i%8, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
			buffered, sum, runs := w.heldCounts()
			if runs == 0 && buffered != sum {
				t.Fatalf("after %d writes: buffered %d, buffers hold %d", i+1, buffered, sum)
			}
			if runs > 0 {
				// The arena's growth leaves at most half of it spare.
				if logical < budget/3 {
					t.Fatalf("first run after %d writes (%d logical bytes): copies over-counted", i+1, logical)
				}
				return
			}
		}
	})
	t.Run("retained batches are charged what they occupy", func(t *testing.T) {
		w := newWriter(t)
		rec := reserved(8000, 4) // 176 KB logical, a quarter frame or more: retained
		defer rec.Release()
		if err := w.Write(0, rec); err != nil {
			t.Fatal(err)
		}
		// It occupies 3.6 MB: charged that, it passes the budget alone
		// and flushes at once.
		if _, _, runs := w.heldCounts(); runs != 1 || occupied(rec) < budget {
			t.Fatalf("a retained batch occupying %d bytes under a %d budget: %d runs, want 1", occupied(rec), budget, runs)
		}
	})
}

// TestSmallBatchesRetainedOrCopied checks which batches under a
// sixteenth of frame_target_bytes the writer retains and which it copies
// into the run's arena, on the demo's rows (16 columns, about 5.6 KiB of
// Go objects per batch): slices of an exactly sized batch are retained
// from 128 rows (21 KB), copied at 64 rows and fewer, and a small batch
// with much spare capacity is copied however many rows it has.
func TestSmallBatchesRetainedOrCopied(t *testing.T) {
	bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Release()
	parts := bt.Batch(demo.Range{Lo: 0, Hi: 32768}, nil)
	exact, err := frame.Concat(demo.Schema(), []arrow.RecordBatch{parts[0].Record}, memory.DefaultAllocator)
	parts[0].Record.Release()
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Release()
	for _, c := range []struct {
		rows int64
		keep bool
	}{{4, false}, {32, false}, {64, false}, {128, true}, {256, true}} {
		s := exact.NewSlice(0, c.rows)
		size, objects := frame.LogicalSize(s), objectsHeld(s)
		keep, perByte := retains(s, size, objects, 0)
		s.Release()
		if keep != c.keep {
			t.Errorf("%d-row slice (%d logical bytes, %d of Go objects, %.2f held per byte): retained %v, want %v", c.rows, size, objects, perByte, keep, c.keep)
		}
	}
	rec := reserved(200, 4) // 4.4 KB logical, ~100 KB held
	defer rec.Release()
	if keep, perByte := retains(rec, frame.LogicalSize(rec), objectsHeld(rec), 0); keep {
		t.Errorf("a batch holding %.1f bytes per logical byte was retained", perByte)
	}

	// A writer given 128-row slices keeps no arena, and encodes each
	// partition's frame as soon as it is full, long before its budget
	// fills; given 32-row slices, it copies them and encodes at the run.
	for _, c := range []struct {
		rows  int64
		arena bool
	}{{128, false}, {32, true}} {
		o := opts(4)
		o.Schema, o.FrameTargetBytes, o.CoalesceBudget = demo.Schema(), 1<<20, 8<<20
		w, err := New(context.Background(), o, newSink(t, testChunk, 64))
		if err != nil {
			t.Fatal(err)
		}
		var logical int64
		for lo := int64(0); lo+c.rows <= exact.NumRows(); lo += c.rows {
			s := exact.NewSlice(lo, lo+c.rows)
			logical += frame.LogicalSize(s)
			err := w.Write(int(lo/c.rows)%4, s)
			s.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		w.b.mu.Lock()
		arena, runs, flushed := w.co.arena.Held(), w.co.runs, w.co.flushed
		w.b.mu.Unlock()
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if runs != 0 {
			t.Fatalf("%d-row slices: %d runs for %d logical bytes under an 8 MiB budget", c.rows, runs, logical)
		}
		if c.arena != (arena > 0) {
			t.Errorf("%d-row slices: the arena holds %d bytes", c.rows, arena)
		}
		// 5.5 MiB over 4 partitions: a frame of each full before Close.
		if early := flushed > 0; early == c.arena {
			t.Errorf("%d-row slices: %d frames flushed before Close", c.rows, flushed)
		}
	}
}
