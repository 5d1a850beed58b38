package reader

import (
	"context"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/engine/frame"
)

func TestBufClass(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want int
	}{
		{0, minBufClass}, {1, minBufClass}, {1 << 16, 16}, {1<<16 + 1, 17},
		{7 << 20, 23}, {8 << 20, 23}, {8<<20 + 1, 24}, {1 << 30, 30}, {1<<30 + 1, -1},
	} {
		if got := bufClass(tc.n); got != tc.want {
			t.Errorf("bufClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	var p bufPool
	b := p.get(5 << 20)
	if len(b) != 5<<20 || cap(b) != 8<<20 {
		t.Fatalf("get(5 MiB): len %d cap %d, want 5 MiB in an 8 MiB buffer", len(b), cap(b))
	}
	p.put(b)
	p.put(make([]byte, 100)) // not from get: its capacity is no class; dropped
	if b := p.get(3 << 20); len(b) != 3<<20 || cap(b) != 4<<20 {
		t.Fatalf("get(3 MiB): len %d cap %d", len(b), cap(b))
	}
}

// Batches decoded from an uncompressed frame point into the GET's buffer,
// so that buffer must never serve another GET; a compressed frame's
// batches own their memory. Batches of one stage, kept while other
// stages of the same shape but other values are read many times over,
// must still hold their own values.
func TestSpanBuffersNotReusedUnderLiveBatches(t *testing.T) {
	layouts := map[string][][]fspec{
		// Groups of several spans: fetched whole, decoded lazily.
		"several objects": interleaved,
		// One sorted run in one object: a group is one span, decoded as
		// it arrives.
		"one object": {{{P: 0, Rows: 3}, {P: 0, Rows: 2}, {P: 1, Rows: 7}, {P: 2, Rows: 9}}},
	}
	for _, compression := range []string{frame.None, frame.LZ4} {
		for name, layout := range layouts {
			t.Run(compression+"/"+name, func(t *testing.T) {
				testSpanBuffers(t, compression, layout)
			})
		}
	}
}

func testSpanBuffers(t *testing.T, compression string, layout [][]fspec) {
	{
		{
			st, m, order := buildStage(t, 4, compression, layout)
			s := FromManifest(st, testLayout, m, Options{Mem: memory.NewGoAllocator()})
			recs, err := s.ReadPartitions(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var kept []arrow.RecordBatch
			for recs.Next() {
				rec := recs.RecordBatch()
				rec.Retain()
				kept = append(kept, rec)
			}
			if err := recs.Err(); err != nil {
				t.Fatal(err)
			}
			recs.Release()

			// The same frames with the workers in the other order: every
			// span the same length, the w column different.
			other := slices.Clone(interleaved)
			slices.Reverse(other)
			st2, m2, _ := buildStage(t, 4, compression, other)
			s2 := FromManifest(st2, testLayout, m2, Options{Mem: memory.NewGoAllocator()})
			for range 20 {
				r2, err := s2.ReadPartitions(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := collect(t, r2); err != nil {
					t.Fatal(err)
				}
				r2.Release()
			}

			var got []row
			for _, rec := range kept {
				got = append(got, rowsOf(rec)...)
				rec.Release()
			}
			equalRows(t, got, order)
		}
	}
}

func rowsOf(rec arrow.RecordBatch) []row {
	w := rec.Column(0).(*array.Int32)
	p := rec.Column(1).(*array.Int32)
	s := rec.Column(2).(*array.Int64)
	out := make([]row, rec.NumRows())
	for i := range out {
		out[i] = row{w.Value(i), p.Value(i), s.Value(i)}
	}
	return out
}
