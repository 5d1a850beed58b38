package reader

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// interleaved is three workers writing four partitions out of order, one
// of them into two objects, and partition 3 left empty.
var interleaved = [][]fspec{
	{{P: 1, Rows: 7}, {P: 0, Rows: 3}, {P: 1, Rows: 5}, {P: 2, Rows: 9}, {P: 0, Rows: 4}},
	{{P: 2, Rows: 6}, {P: 2, Rows: 2, Obj: 1}, {P: 0, Rows: 8, Obj: 1}, {P: 1, Rows: 1}},
	{{P: 0, Rows: 11}},
}

func TestStreamOrderAndValues(t *testing.T) {
	tests := []struct {
		name        string
		compression string
		opts        Options
	}{
		{name: "defaults lz4", compression: frame.LZ4},
		{name: "uncompressed frames share range buffers", compression: frame.None},
		{name: "zstd serial", compression: frame.Zstd, opts: Options{ReadAhead: 1}},
		{name: "every frame its own GET", compression: frame.LZ4, opts: Options{RangeBytes: 1, ReadAhead: 3}},
		{name: "small ranges no gaps", compression: frame.None, opts: Options{RangeBytes: 2000, GapBytes: -1, ReadAhead: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, m, order := buildStage(t, 4, tc.compression, interleaved)
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			tc.opts.Mem = mem
			s := FromManifest(st, testLayout, m, tc.opts)

			for _, ps := range [][]int{nil, {2, 0}, {1}, {3}, {3, 3, 1, 1}} {
				t.Run(fmt.Sprint(ps), func(t *testing.T) {
					in := map[int32]bool{}
					for _, p := range ps {
						in[int32(p)] = true
					}
					var want []row
					for _, r := range order {
						if len(ps) == 0 || in[r.P] {
							want = append(want, r)
						}
					}
					recs, err := s.ReadPartitions(context.Background(), ps)
					if err != nil {
						t.Fatal(err)
					}
					got, err := collect(t, recs)
					recs.Release()
					if err != nil {
						t.Fatal(err)
					}
					equalRows(t, got, want)
				})
			}
		})
	}
}

func TestReadResultsPages(t *testing.T) {
	// One frame per object, so no two frames share a GET and the GET
	// count is exactly the number of frames a page touches.
	var workers [][]fspec
	for w := range 3 {
		var fs []fspec
		for i := range 4 {
			fs = append(fs, fspec{P: (i + w) % 3, Rows: 5 + 2*i + w, Obj: i})
		}
		workers = append(workers, fs)
	}
	st, m, order := buildStage(t, 3, frame.LZ4, workers)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := FromManifest(st, testLayout, m, Options{Mem: mem})
	total := int64(len(order))

	// Row ranges of the frames in delivery order, from the manifest.
	var frameRows [][2]int64
	var at int64
	for p := range m.Partitions {
		for _, w := range m.Workers {
			for _, f := range w.Frames {
				if f.Partition == p {
					frameRows = append(frameRows, [2]int64{at, at + f.Rows})
					at += f.Rows
				}
			}
		}
	}
	framesTouched := func(off, lim int64) int {
		end := total
		if lim >= 0 {
			end = min(total, off+lim)
		}
		n := 0
		for _, fr := range frameRows {
			if off < end && fr[0] < end && fr[1] > off {
				n++
			}
		}
		return n
	}
	for _, pg := range []struct{ off, lim int64 }{
		{0, -1}, {0, 1}, {0, 5}, {3, 4}, {4, 9}, {17, 30}, {total - 1, 10}, {total, 5}, {total + 3, -1}, {10, 0},
		{1, total - 2}, {25, -1},
	} {
		t.Run(fmt.Sprintf("offset=%d,limit=%d", pg.off, pg.lim), func(t *testing.T) {
			before, _ := st.stats()
			recs, err := s.ReadResults(context.Background(), pg.off, pg.lim)
			if err != nil {
				t.Fatal(err)
			}
			got, err := collect(t, recs)
			recs.Release()
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := min(pg.off, total), total
			if pg.lim >= 0 {
				hi = min(total, pg.off+pg.lim)
			}
			equalRows(t, got, order[lo:max(lo, hi)])
			gets, _ := st.stats()
			if want := framesTouched(pg.off, pg.lim); gets-before != want || recs.Ranges() != want {
				t.Errorf("%d GETs, %d ranges planned; page touches %d frames", gets-before, recs.Ranges(), want)
			}
		})
	}
	if _, err := s.ReadResults(context.Background(), -1, 5); err == nil {
		t.Error("negative offset accepted")
	}
}

// oneFramePerObject is n frames of one worker, each in its own object, so
// every frame is its own GET.
func oneFramePerObject(n int) [][]fspec {
	var fs []fspec
	for i := range n {
		fs = append(fs, fspec{P: i % 2, Rows: 10, Obj: i})
	}
	return [][]fspec{fs}
}

func TestPrefetchWindow(t *testing.T) {
	const readAhead, frames = 3, 12 // of partition 0, and 12 of partition 1
	st, m, _ := buildStage(t, 2, frame.LZ4, oneFramePerObject(2*frames))
	st.delay = 2 * time.Millisecond
	s := FromManifest(st, testLayout, m, Options{ReadAhead: readAhead})
	// One partition streams span by span (several are fetched in groups
	// that are held whole: TestPartitionGroups).
	recs, err := s.ReadPartitions(context.Background(), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	var got int
	for recs.Next() {
		got++
		// The batch in hand holds one slot of the window, so readAhead-1
		// more ranges may be asked for: no more, and, once the
		// prefetchers had a moment, no fewer.
		limit := min(frames, got+readAhead-1)
		deadline := time.Now().Add(2 * time.Second)
		for gets, _ := st.stats(); gets < limit; gets, _ = st.stats() {
			if time.Now().After(deadline) {
				t.Fatalf("after %d batches only %d GETs were issued; prefetch should reach %d", got, gets, limit)
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(3 * time.Millisecond)
		if gets, _ := st.stats(); gets > limit {
			t.Fatalf("after %d batches %d GETs were issued; the window allows %d", got, gets, limit)
		}
	}
	if err := recs.Err(); err != nil {
		t.Fatal(err)
	}
	if got != frames || int(recs.Ranges()) != frames {
		t.Fatalf("%d batches, %d ranges; want %d", got, recs.Ranges(), frames)
	}
	if _, peak := st.stats(); peak > readAhead || peak < 2 {
		t.Errorf("%d GETs at once; want 2..%d", peak, readAhead)
	}
}

func TestOversizeFramesFetchedAlone(t *testing.T) {
	// RangeBytes of 1 makes every frame larger than the whole budget
	// (ReadAhead x RangeBytes): each must be fetched with nothing else in
	// flight, so memory stays at one oversized frame.
	st, m, order := buildStage(t, 2, frame.LZ4, oneFramePerObject(8))
	st.delay = 2 * time.Millisecond
	s := FromManifest(st, testLayout, m, Options{ReadAhead: 4, RangeBytes: 1})
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
	if _, peak := st.stats(); peak != 1 {
		t.Errorf("%d oversized GETs at once, want 1", peak)
	}
}

func TestCancelStopsPrefetch(t *testing.T) {
	st, m, _ := buildStage(t, 2, frame.LZ4, oneFramePerObject(20))
	st.block = true
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	base := runtime.NumGoroutine()
	s := FromManifest(st, testLayout, m, Options{ReadAhead: 4, Mem: mem})

	ctx, cancel := context.WithCancel(context.Background())
	recs, err := s.ReadPartitions(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(20*time.Millisecond, cancel)
	if recs.Next() {
		t.Fatal("Next returned a batch from a store that never answers")
	}
	if !errors.Is(recs.Err(), context.Canceled) {
		t.Fatalf("Err = %v, want context.Canceled", recs.Err())
	}
	if gets, _ := st.stats(); gets > 4 {
		t.Errorf("%d GETs started, window is 4", gets)
	}
	recs.Release()
	noLeak(t, base)
}

func TestReleaseMidStream(t *testing.T) {
	st, m, order := buildStage(t, 2, frame.None, oneFramePerObject(30))
	st.delay = time.Millisecond
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	base := runtime.NumGoroutine()
	s := FromManifest(st, testLayout, m, Options{ReadAhead: 5, Mem: mem})
	recs, err := s.ReadPartitions(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if !recs.Next() {
			t.Fatalf("stream ended early: %v", recs.Err())
		}
	}
	// A batch the caller retained outlives the stream.
	kept := recs.RecordBatch()
	kept.Retain()
	recs.Retain()
	recs.Release() // still one reference: nothing stops
	if !recs.Next() {
		t.Fatalf("stream stopped while referenced: %v", recs.Err())
	}
	recs.Release()
	if recs.Next() {
		t.Error("Next after the last Release returned a batch")
	}
	if err := recs.Err(); err != nil {
		t.Errorf("Err after Release = %v, want nil", err)
	}
	noLeak(t, base)
	// The frames are uncompressed, so the batch points into the range
	// buffer: it must be intact after the stream let go of it.
	seq := kept.Column(2).(*array.Int64)
	for i := range seq.Len() {
		if want := order[20+i].Seq; seq.Value(i) != want {
			t.Fatalf("retained batch row %d has seq %d, want %d", i, seq.Value(i), want)
		}
	}
	kept.Release()
	if err := recs.Close(); err != nil {
		t.Errorf("Close after Release = %v", err)
	}
}

func TestEmptyStage(t *testing.T) {
	tests := []struct {
		name    string
		workers [][]fspec
		noSchem bool
	}{
		{name: "workers wrote nothing", workers: [][]fspec{nil, nil}},
		{name: "no schema recorded", workers: [][]fspec{nil}, noSchem: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, m, _ := buildStage(t, 3, frame.LZ4, tc.workers)
			if tc.noSchem {
				m.Schema = nil
			}
			s := FromManifest(st, testLayout, m, Options{})
			if s.Schema() == nil {
				t.Fatal("no schema")
			}
			if !tc.noSchem && !s.Schema().Equal(testSchema) {
				t.Errorf("schema %s", s.Schema())
			}
			for _, read := range []func() (*Records, error){
				func() (*Records, error) { return s.ReadPartitions(context.Background(), nil) },
				func() (*Records, error) { return s.ReadPartitions(context.Background(), []int{2}) },
				func() (*Records, error) { return s.ReadResults(context.Background(), 0, -1) },
			} {
				recs, err := read()
				if err != nil {
					t.Fatal(err)
				}
				if recs.Schema() == nil {
					t.Error("stream has no schema")
				}
				got, err := collect(t, recs)
				recs.Release()
				if err != nil || len(got) != 0 {
					t.Errorf("got %d rows, %v", len(got), err)
				}
			}
			if gets, _ := st.stats(); gets != 0 {
				t.Errorf("%d GETs for an empty stage", gets)
			}
		})
	}
}

func TestPartitionOutOfRange(t *testing.T) {
	st, m, _ := buildStage(t, 4, frame.LZ4, interleaved)
	s := FromManifest(st, testLayout, m, Options{})
	_, err := s.ReadPartitions(context.Background(), []int{1, 4})
	if !errors.Is(err, ErrPartition) {
		t.Fatalf("err = %v, want ErrPartition", err)
	}
	mustContain(t, err, "partition 4", "4 partitions", testQuery)
}

// TestFrameFailures damages one frame's bytes in several ways; each must
// end the stream with an error naming the frame, after exactly the rows
// that come before it.
func TestFrameFailures(t *testing.T) {
	// Frames are small, so by default the whole of worker 0's object is
	// one GET: frames before the damaged one in delivery order, some in
	// the same GET, must still be delivered, and nothing after it.
	tests := []struct {
		name     string
		bad      int // index of the damaged frame in worker 0's Frames
		damage   func(obj []byte, f frameAt) []byte
		fixCRC   bool // recompute the manifest CRC so decoding is reached
		sentinel error
		contains []string
	}{
		{
			name: "flipped byte", bad: 0,
			damage: func(obj []byte, f frameAt) []byte {
				obj[f.off+f.len/2] ^= 0x40
				return obj
			},
			sentinel: ErrChecksum,
			contains: []string{"checksum", "partition 1"},
		},
		{
			// The last frame of the object, so no frame delivered before it
			// is cut as well.
			name: "truncated inside the frame", bad: 4,
			damage: func(obj []byte, f frameAt) []byte {
				return obj[:f.off+7]
			},
			sentinel: ErrTruncated,
			contains: []string{"truncated", "got 7"},
		},
		{
			name: "truncated before the frame", bad: 4,
			damage: func(obj []byte, f frameAt) []byte {
				return obj[:f.off]
			},
			sentinel: ErrTruncated,
			contains: []string{"truncated", "got 0"},
		},
		{
			name: "garbage that matches its checksum", bad: 2,
			damage: func(obj []byte, f frameAt) []byte {
				for i := f.off; i < f.off+f.len; i++ {
					obj[i] = byte(i)
				}
				return obj
			},
			fixCRC:   true,
			sentinel: ErrCorrupt,
			contains: []string{"corrupt frame"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, opts := range []Options{{}, {RangeBytes: 1, ReadAhead: 2}} {
				st, m, order := buildStage(t, 4, frame.LZ4, interleaved)
				w := &m.Workers[0]
				bad := tc.bad
				key := testLayout.ObjectKey(testQuery, testStage, w.Objects[0].Key)
				f := w.Frames[bad]
				obj := append([]byte(nil), st.objs[key]...)
				st.objs[key] = tc.damage(obj, frameAt{int(f.Offset), int(f.Length)})
				if tc.fixCRC {
					w.Frames[bad].CRC32C = store.CRC32C(st.objs[key][f.Offset : f.Offset+f.Length])
				}
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				opts.Mem = mem
				s := FromManifest(st, testLayout, m, opts)
				recs, err := s.ReadPartitions(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := collect(t, recs)
				if recs.Next() {
					t.Error("Next returned a batch after the error")
				}
				recs.Release()
				mem.AssertSize(t, 0)

				if !errors.Is(err, tc.sentinel) {
					t.Fatalf("err = %v, want %v", err, tc.sentinel)
				}
				var fe *FrameError
				if !errors.As(err, &fe) || fe.Key != key || fe.Offset != f.Offset || fe.Partition != f.Partition || fe.Worker != "0" {
					t.Fatalf("err = %#v, want a FrameError for %s offset %d partition %d", err, key, f.Offset, f.Partition)
				}
				mustContain(t, err, append(tc.contains, key, fmt.Sprintf("offset %d", f.Offset), fmt.Sprintf("partition %d", f.Partition))...)
				equalRows(t, got, order[:rowsBefore(m, 0, bad)])
			}
		})
	}
}

type frameAt struct{ off, len int }

// rowsBefore counts the rows delivered before frame idx of worker w when
// reading every partition, following the documented order.
func rowsBefore(m *manifest.Stage, w, idx int) int {
	n := 0
	for p := range m.Partitions {
		for wi, wk := range m.Workers {
			for fi, f := range wk.Frames {
				if f.Partition != p {
					continue
				}
				if wi == w && fi == idx {
					return n
				}
				n += int(f.Rows)
			}
		}
	}
	panic("frame not in manifest")
}
