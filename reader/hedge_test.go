package reader

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
)

// stallStore is a memStore whose nth GET (1-based) hangs until its
// context ends, like a request stuck on a bad connection.
type stallStore struct {
	*memStore
	mu    sync.Mutex
	n     int
	stall int
}

func (s *stallStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	s.mu.Lock()
	s.n++
	stuck := s.n == s.stall
	s.mu.Unlock()
	if stuck {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.memStore.GetRange(ctx, key, off, length)
}

// TestHedgedRangeRead: a GET stuck on its connection is hedged once, the
// hedge wins, and the read delivers every row. A first read teaches the
// Hedger the store's latency (no hedging before it has samples); the
// second read's 12th GET is the stuck one.
func TestHedgedRangeRead(t *testing.T) {
	const frames = 24
	st, m, order := buildStage(t, 2, frame.LZ4, oneFramePerObject(frames))
	st.delay = time.Millisecond
	ss := &stallStore{memStore: st}
	// A GET taking longer than 200 ms is late: only the stuck one is,
	// even on a loaded machine.
	h := NewHedger(4, 200*time.Millisecond)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := FromManifest(ss, testLayout, m, Options{ReadAhead: 3, Hedge: h, Mem: mem})
	read := func() {
		t.Helper()
		recs, err := s.ReadPartitions(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := collect(t, recs)
		recs.Release()
		if err != nil {
			t.Fatal(err)
		}
		equalRows(t, got, order)
	}
	read()
	if hedged, _ := h.Stats(); hedged != 0 {
		t.Fatalf("%d GETs hedged while none was stuck", hedged)
	}
	gets0, _ := st.stats()
	ss.mu.Lock()
	n0 := ss.n
	ss.stall = n0 + 12
	ss.mu.Unlock()
	start := time.Now()
	read()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("read took %v: the stuck GET was not hedged", d)
	}
	// One GET per frame, plus exactly one for the hedge.
	if gets, _ := st.stats(); gets-gets0 != frames {
		t.Fatalf("%d GETs reached the store, want %d (the stuck one never did)", gets-gets0, frames)
	}
	if ss.n-n0 != frames+1 {
		t.Fatalf("%d GETs issued, want %d: one per frame and one hedge", ss.n-n0, frames+1)
	}
	if hedged, won := h.Stats(); hedged != 1 || won != 1 {
		t.Fatalf("hedged %d, won %d; want 1 and 1", hedged, won)
	}
}

// TestHedgeKeepsPartialFrames: when every request of a hedged span fails,
// the frames that arrived whole are still delivered, as without hedging.
func TestHedgeKeepsPartialFrames(t *testing.T) {
	st, m, order := buildStage(t, 4, frame.LZ4, interleaved)
	w := &m.Workers[0]
	key := testLayout.ObjectKey(testQuery, testStage, w.Objects[0].Key)
	last := w.Frames[4]
	st.objs[key] = st.objs[key][:last.Offset+7]
	h := NewHedger(2, time.Millisecond)
	for _, opts := range []Options{{Hedge: h}, {RangeBytes: 1, ReadAhead: 2, Hedge: h}} {
		s := FromManifest(st, testLayout, m, opts)
		recs, err := s.ReadPartitions(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := collect(t, recs)
		recs.Release()
		if err == nil {
			t.Fatal("truncated object read without error")
		}
		mustContain(t, err, "truncated", "got 7")
		equalRows(t, got, order[:rowsBefore(m, 0, 4)])
	}
}

// TestHedgeCutsOffStuckRunGET: ReadPartitions with runs (SpanBytes >
// RangeBytes, spans sharing one GET), of one partition's frames and of a
// group of partitions. The run's opening GET hangs until its context
// ends; the span's hedge wins, and the win cuts the stuck GET off, so
// the read goes on and delivers every row.
func TestHedgeCutsOffStuckRunGET(t *testing.T) {
	var group []fspec
	for p := range 12 {
		group = append(group, fspec{P: p, Rows: 50})
	}
	for _, c := range []struct {
		name              string
		partitions, ahead int
		frames            []fspec
	}{
		{"one partition", 1, 2, manyFrames(16, 1, 50)},
		{"a group of partitions", 12, 4, group},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, m, order := buildStage(t, c.partitions, frame.LZ4, [][]fspec{c.frames})
			ss := &stallStore{memStore: st}
			h := NewHedger(4, 100*time.Millisecond)
			rb := frameBytes(FromManifest(st, testLayout, m, Options{}), 1)
			// Warm the hedger: a GET per span, no runs.
			warm := FromManifest(ss, testLayout, m, Options{RangeBytes: rb, SpanBytes: rb, ReadAhead: c.ahead, Hedge: h})
			for range 2 {
				recs, err := warm.ReadPartitions(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := collect(t, recs); err != nil {
					t.Fatal(err)
				}
				recs.Release()
			}
			if h.h.DelayFor(rb) == 0 {
				t.Fatal("hedger not warm")
			}
			ss.mu.Lock()
			ss.stall = ss.n + 1 // the run's opening GET
			ss.mu.Unlock()
			s := FromManifest(ss, testLayout, m, Options{RangeBytes: rb, SpanBytes: 1 << 30, ReadAhead: c.ahead, Hedge: h})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			recs, err := s.ReadPartitions(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := collect(t, recs)
			recs.Release()
			if hedged, won := h.Stats(); err != nil || won == 0 {
				t.Fatalf("a hedged span's stuck run GET: after %v (hedged %d, won %d): %v; %d of %d rows", time.Since(start), hedged, won, err, len(got), len(order))
			}
			equalRows(t, got, order)
		})
	}
}
