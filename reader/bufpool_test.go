package reader

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/frame"
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
	type layout struct {
		frames     [][]fspec
		rangeBytes int64
	}
	layouts := map[string]layout{
		// Groups of several spans: fetched whole, decoded lazily.
		"several objects": {frames: interleaved},
		// One sorted run in one object: a group is one span, decoded as
		// it arrives.
		"one object": {frames: [][]fspec{{{P: 0, Rows: 3}, {P: 0, Rows: 2}, {P: 1, Rows: 7}, {P: 2, Rows: 9}}}},
		// One span of 12 frames, streamed to the caller frame by frame
		// from a 128 KiB range. The first frame is uncompressed: its
		// batches point into the buffer even though the later frames'
		// do not.
		"one object, streamed": {frames: [][]fspec{rawFirst(manyFrames(12, 3, 500))}, rangeBytes: 128 << 10},
	}
	for _, compression := range []string{frame.None, frame.LZ4} {
		for name, l := range layouts {
			t.Run(compression+"/"+name, func(t *testing.T) {
				testSpanBuffers(t, compression, l.frames, l.rangeBytes)
			})
		}
	}
}

// rawFirst marks the first frame uncompressed.
func rawFirst(fs []fspec) []fspec {
	fs[0].Raw = true
	return fs
}

// manyFrames is n frames of rows rows each, in partition order over
// partitions, as a sorted run stores them.
func manyFrames(n, partitions, rows int) []fspec {
	var out []fspec
	for i := range n {
		out = append(out, fspec{P: i * partitions / n, Rows: rows})
	}
	return out
}

func testSpanBuffers(t *testing.T, compression string, layout [][]fspec, rangeBytes int64) {
	// One P: a buffer put back wrongly is then the next one a GET of its
	// class takes (sync.Pool keeps what is put on the P that put it).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	{
		{
			st, m, order := buildStage(t, 4, compression, layout)
			s := FromManifest(st, testLayout, m, Options{Mem: memory.NewGoAllocator(), RangeBytes: rangeBytes})
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

// TestSpanStreamsToCaller: a span's frames reach the caller as they
// arrive, while the rest of its GET is still on its way, and every row
// arrives in order.
func TestSpanStreamsToCaller(t *testing.T) {
	const frames, rows = 12, 500
	st, m, order := buildStage(t, 4, frame.LZ4, [][]fspec{manyFrames(frames, 3, rows)})
	third := m.Workers[0].Frames[2]
	st.stallAt, st.resume = third.Offset+third.Length, make(chan struct{})
	s := FromManifest(st, testLayout, m, Options{Mem: memory.NewGoAllocator()})
	recs, err := s.ReadPartitions(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	firsts := make(chan []row, 1)
	go func() {
		var got []row
		for len(got) < 3*rows && recs.Next() {
			got = append(got, rowsOf(recs.RecordBatch())...)
		}
		firsts <- got
	}()
	var got []row
	select {
	case got = <-firsts:
	case <-time.After(10 * time.Second):
		close(st.resume)
		t.Fatal("the frames that arrived were not delivered while the GET was still receiving")
	}
	if gets, _ := st.stats(); gets != 1 {
		t.Fatalf("%d GETs, want the span's one", gets)
	}
	close(st.resume)
	for recs.Next() {
		got = append(got, rowsOf(recs.RecordBatch())...)
	}
	if err := recs.Err(); err != nil {
		t.Fatal(err)
	}
	equalRows(t, got, order)
}

// TestReleaseWhileDecodingAhead: a stream released while a fetch waits
// to hand it more decoded frames stops the fetch's goroutine and frees
// what it decoded.
func TestReleaseWhileDecodingAhead(t *testing.T) {
	st, m, _ := buildStage(t, 4, frame.LZ4, [][]fspec{manyFrames(24, 3, 500)})
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	base := runtime.NumGoroutine()
	s := FromManifest(st, testLayout, m, Options{Mem: mem})
	recs, err := s.ReadPartitions(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if !recs.Next() {
			t.Fatalf("stream ended early: %v", recs.Err())
		}
	}
	// The fetch's goroutine fills its queue of decoded frames, then
	// waits for the caller.
	deadline := time.Now().Add(10 * time.Second)
	for len(recs.cur.out) < aheadFrames {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames decoded ahead, want %d", len(recs.cur.out), aheadFrames)
		}
		time.Sleep(time.Millisecond)
	}
	recs.Release()
	if recs.Next() {
		t.Fatal("Next after Release returned a batch")
	}
	noLeak(t, base)
}

// TestDecodeBudget: ranges ahead of the one being delivered decode while
// the stream's decode budget (read_ahead x read_range_bytes of logical
// bytes) lasts, then wait: with the caller idle after its first batch,
// the stream fills the budget and holds no more than it, besides
// aheadFrames frames of the range being delivered.
// TestDecodeBudget: ranges ahead of an idle caller decode, within the
// starting budget (a caller that never waits for decoding does not grow
// it), and a caller that reads on gets every row.
func TestDecodeBudget(t *testing.T) {
	st, m, order := buildStage(t, 4, frame.LZ4, [][]fspec{manyFrames(48, 4, 500)})
	s := FromManifest(st, testLayout, m, Options{Mem: memory.NewGoAllocator(), RangeBytes: 32 << 10, ReadAhead: 8})
	recs, err := s.ReadPartitions(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	if !recs.Next() {
		t.Fatal(recs.Err())
	}
	got := rowsOf(recs.RecordBatch())
	frameBytes := m.Workers[0].Frames[0].Bytes
	g := recs.gate
	start := int64(8*32<<10) / startShare
	if start < 3*frameBytes {
		t.Fatalf("starting budget %d holds fewer than 3 frames of %d bytes: the test shows nothing", start, frameBytes)
	}
	deadline := time.Now().Add(10 * time.Second)
	for held, _ := g.state(); held < start-frameBytes; held, _ = g.state() {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes decoded ahead of an idle caller, want the starting budget of %d filled: ranges ahead do not decode", held, start)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	held, budget := g.state()
	if budget != start {
		t.Fatalf("budget %d after an idle caller, want the starting %d: it grew without the caller waiting", budget, start)
	}
	if most := start + aheadFrames*frameBytes; held > most {
		t.Fatalf("%d bytes decoded ahead of an idle caller, want at most %d (the budget and %d frames of %d bytes)", held, most, aheadFrames, frameBytes)
	}
	for recs.Next() {
		got = append(got, rowsOf(recs.RecordBatch())...)
	}
	if err := recs.Err(); err != nil {
		t.Fatal(err)
	}
	equalRows(t, got, order)
}

// TestDecodeBudgetGrows: the budget rises to its ceiling when the caller
// waits while the head decodes or a fetch is held back by the budget,
// and not while every fetch waits for its bytes.
func TestDecodeBudgetGrows(t *testing.T) {
	for _, c := range []struct {
		name string
		busy func(t *testing.T, g *decodeGate, head *fetch) // then the caller waits
	}{
		{"a fetch held back", func(t *testing.T, g *decodeGate, head *fetch) {
			a, b := &fetch{}, &fetch{}
			g.admit(a, 4)
			g.admit(a, 4)
			admitted := make(chan bool, 1)
			go func() { admitted <- g.admit(b, 4) }() // 8 + 4 > 8
			waitHeldBack(t, g, b)
			t.Cleanup(func() {
				if !<-admitted {
					t.Error("b was not admitted once the budget rose")
				}
			})
		}},
		{"the head decoding", func(t *testing.T, g *decodeGate, head *fetch) {
			g.admit(head, 4)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newDecodeGate(64) // budget 8
			head := &fetch{}
			g.deliverFrom(head)
			g.starved(head) // nothing decoding, nothing held back
			if _, bud := g.state(); bud != 8 {
				t.Fatalf("budget %d after a wait for bytes, want 8", bud)
			}
			c.busy(t, g, head)
			g.starved(head)
			if _, bud := g.state(); bud != 64 {
				t.Fatalf("budget %d after the caller waited for decoding, want the ceiling 64", bud)
			}
		})
	}
}

// TestDecodeBudgetGrowsForFastCaller: a caller that only counts rows
// waits for decoding, and its stream's budget grows past the start.
func TestDecodeBudgetGrowsForFastCaller(t *testing.T) {
	st, m, order := buildStage(t, 4, frame.LZ4, [][]fspec{manyFrames(96, 4, 500)})
	s := FromManifest(st, testLayout, m, Options{Mem: memory.NewGoAllocator(), RangeBytes: 32 << 10, ReadAhead: 8})
	recs, err := s.ReadPartitions(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	var got []row
	for recs.Next() {
		got = append(got, rowsOf(recs.RecordBatch())...)
	}
	if err := recs.Err(); err != nil {
		t.Fatal(err)
	}
	equalRows(t, got, order)
	if _, b := recs.gate.state(); b <= int64(8*32<<10)/startShare {
		t.Fatalf("budget %d after a fast caller, want more than the starting %d", b, int64(8*32<<10)/startShare)
	}
}

// state returns the decoded bytes held and the budget now.
func (g *decodeGate) state() (held, budget int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.b.held, g.b.limit
}

func waitHeldBack(t *testing.T, g *decodeGate, f *fetch) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		back := f.heldBack
		g.mu.Unlock()
		if back {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetch was admitted, want it held back")
		}
		time.Sleep(time.Millisecond)
	}
}
