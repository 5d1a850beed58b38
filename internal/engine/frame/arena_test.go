package frame

import (
	"testing"

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
	if segs, held := a.Finish(); segs != nil || held != 0 {
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
	segs, held := a.Finish()
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
