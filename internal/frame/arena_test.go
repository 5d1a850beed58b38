package frame

import (
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestArenaSegments: rows appended past a segment's size land in the next
// segment, numbered as Append said, and Finish hands back every row and
// the bytes Append reported.
func TestArenaSegments(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)
	a, ok := NewArena(schema)
	if !ok {
		t.Fatal("int64 columns are copied")
	}
	if segs, held, run := a.Finish(); segs != nil || held != 0 || run != nil {
		t.Fatalf("empty arena finished as %d segments, %d bytes", len(segs), held)
	}
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	const rows = 4096 // 32 KiB a batch
	for i := range rows {
		b.Append(int64(i))
	}
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, rows)
	defer rec.Release()

	type place struct {
		seg int
		lo  int64
	}
	var (
		places []place
		grown  int64 = a.Held()
	)
	for range 2 * arenaSegment / (8 * rows) * 3 / 2 { // a segment and a half
		seg, lo, grew, err := a.Append(rec)
		if err != nil {
			t.Fatal(err)
		}
		places = append(places, place{seg, lo})
		grown += grew
	}
	if last := places[len(places)-1]; last.seg == 0 {
		t.Fatal("rows past a segment's size did not start a new segment")
	}
	if grown != a.Held() {
		t.Fatalf("Append reported %d bytes, the arena holds %d", grown, a.Held())
	}
	if g := a.Growth(); g <= 0 {
		t.Fatalf("growth of a growing segment: %d", g)
	}
	segs, held, _ := a.Finish()
	defer func() {
		for _, s := range segs {
			if s != nil {
				s.Release()
			}
		}
	}()
	if held != grown {
		t.Fatalf("Finish reported %d bytes, Append %d", held, grown)
	}
	for i, p := range places {
		s := segs[p.seg]
		if s == nil || s.NumRows() < p.lo+rows {
			t.Fatalf("batch %d at rows [%d, %d) of segment %d, which is too short", i, p.lo, p.lo+rows, p.seg)
		}
		if v := s.Column(0).(*array.Int64).Value(int(p.lo) + 7); v != 7 {
			t.Fatalf("batch %d: row 7 is %d", i, v)
		}
	}
	if len(a.segs) != 1 || a.segs[0].Rows() != 0 {
		t.Fatalf("after Finish: %d segments, the first of %d rows; want one empty segment", len(a.segs), a.segs[0].Rows())
	}
	var none *Arena
	if none.Growth() != 0 || none.Held() != 0 {
		t.Fatal("a nil arena grows by nothing")
	}
}

// TestArenaRecycle: a run handed back with Recycle lends its buffers to
// the next runs' segments, which grow and count exactly as new ones
// would (same Held after every Append, so a writer's run boundaries do
// not depend on when a run was recycled), and hold their own rows.
func TestArenaRecycle(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "v", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	batch := func(seed, rows int) arrow.RecordBatch {
		vb := array.NewInt64Builder(memory.DefaultAllocator)
		defer vb.Release()
		sb := array.NewStringBuilder(memory.DefaultAllocator)
		defer sb.Release()
		for i := range rows {
			vb.Append(int64(seed*1_000_000 + i))
			if i%7 == 0 {
				sb.AppendNull()
			} else {
				sb.Append(strings.Repeat("x", (seed+i)%23))
			}
		}
		v, s := vb.NewArray(), sb.NewArray()
		defer v.Release()
		defer s.Release()
		return array.NewRecordBatch(schema, []arrow.Array{v, s}, int64(rows))
	}
	// Runs of different sizes and shapes, the same for both arenas.
	// (1 MiB a segment: about 45,000 of these rows.)
	runs := [][]int{{30000, 50000, 40000, 90000, 20000, 60000}, {80000, 80000, 80000, 80000, 80000}, {100, 200, 30000}, {70000, 70000, 70000, 70000, 70000, 70000, 70000}}
	fresh, _ := NewArena(schema)
	reused, _ := NewArena(schema)
	var lent int
	for r, sizes := range runs {
		spare := map[*byte]bool{}
		for _, acc := range reused.spare {
			spare[unsafe.SliceData(acc.cols[0].vals)] = true
		}
		for i, n := range sizes {
			rec := batch(r*100+i, n)
			_, _, g1, err1 := fresh.Append(rec)
			_, _, g2, err2 := reused.Append(rec)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if g1 != g2 || fresh.Held() != reused.Held() {
				t.Fatalf("run %d append %d: a recycled arena grew %d to %d bytes, a new one %d to %d", r, i, g2, reused.Held(), g1, fresh.Held())
			}
			rec.Release()
		}
		for _, seg := range reused.segs {
			if p := unsafe.SliceData(seg.cols[0].vals); p != nil && spare[p] {
				lent++
			}
		}
		fs, _, _ := fresh.Finish()
		rs, _, run := reused.Finish()
		// Every row as written, in the recycled arena's segments.
		var want, got []int64
		for i := range fs {
			if fs[i] != nil {
				want = append(want, fs[i].Column(0).(*array.Int64).Int64Values()...)
				fs[i].Release()
			}
			if rs[i] != nil {
				got = append(got, rs[i].Column(0).(*array.Int64).Int64Values()...)
				if n := rs[i].Column(1).(*array.String).NullN(); n == 0 {
					t.Fatalf("run %d segment %d: the string column's nulls were lost", r, i)
				}
				rs[i].Release()
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("run %d: %d rows read back from recycled segments differ from the %d written", r, len(got), len(want))
		}
		reused.Recycle(run)
		if n := len(reused.spare); n > len(fs)-1 {
			t.Fatalf("run %d of %d segments left %d spare ones, want at most %d", r, len(fs), n, len(fs)-1)
		}
		var held int64
		for _, s := range reused.spare {
			held += s.Held()
		}
		if got := reused.Spare(); got != held || (len(reused.spare) > 0) != (got > 0) {
			t.Fatalf("run %d: Spare() = %d, the %d spare segments hold %d", r, got, len(reused.spare), held)
		}
	}
	if lent == 0 {
		t.Fatal("no segment took a recycled buffer")
	}
	before, n := reused.Spare(), len(reused.spare)
	reused.DropSpare(1)
	if len(reused.spare) != n-1 || reused.Spare() >= before {
		t.Fatalf("DropSpare(1) of %d segments (%d bytes) left %d (%d bytes), want one fewer", n, before, len(reused.spare), reused.Spare())
	}
	reused.DropSpare(reused.Spare())
	if reused.Spare() != 0 || len(reused.spare) != 0 {
		t.Fatalf("after DropSpare: %d bytes in %d segments", reused.Spare(), len(reused.spare))
	}
}
