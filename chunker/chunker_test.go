package chunker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/store"
)

// memSink keeps emitted chunks in memory and checks the chunk contract.
type memSink struct {
	t         *testing.T
	chunkSize int64
	mu        sync.Mutex
	objects   map[int][][]byte
	last      map[int]bool
	held      int
	peak      int
	limit     chan struct{}
	created   int
	sizes     []int64
}

func newSink(t *testing.T, chunkSize int64, budget int) *memSink {
	return &memSink{t: t, chunkSize: chunkSize, objects: map[int][][]byte{}, last: map[int]bool{}, limit: make(chan struct{}, budget)}
}

func (s *memSink) Acquire(ctx context.Context) ([]byte, error) {
	select {
	case s.limit <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	s.held++
	s.peak = max(s.peak, s.held)
	s.mu.Unlock()
	return make([]byte, 0, s.chunkSize), nil
}

func (s *memSink) Release([]byte) {
	s.mu.Lock()
	s.held--
	s.mu.Unlock()
	<-s.limit
}

func (s *memSink) Emit(obj int, part int32, buf []byte, last bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last[obj] {
		s.t.Errorf("object %d: chunk after the last", obj)
	}
	if int(part) != len(s.objects[obj])+1 {
		s.t.Errorf("object %d: part %d out of order", obj, part)
	}
	if !last && int64(len(buf)) != s.chunkSize {
		s.t.Errorf("object %d part %d: %d bytes, want exactly %d", obj, part, len(buf), s.chunkSize)
	}
	s.objects[obj] = append(s.objects[obj], bytes.Clone(buf))
	s.last[obj] = last
	s.held--
	<-s.limit
	return nil
}

func (s *memSink) object(i int) []byte { return bytes.Join(s.objects[i], nil) }

// testChunk is the chunk size of the tests' sinks.
const testChunk = 100_000

// Create starts the next object, cut into chunks as the uploader cuts
// an object written from memory; sizes records each size hint.
func (s *memSink) Create(size int64, onDisk bool, release func()) (Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if onDisk {
		s.t.Errorf("object %d from disk: the sink takes no sections", s.created)
	}
	s.sizes = append(s.sizes, size)
	s.created++
	return &memObject{s: s, obj: s.created - 1}, nil
}

// Limit is what the sink's chunks hold.
func (s *memSink) Limit(onDisk bool) int64 {
	if onDisk {
		return 0
	}
	return s.chunkSize * store.MaxParts
}

// memObject is an object of a memSink, cut into chunks of its size.
type memObject struct {
	s    *memSink
	obj  int
	part int32
	cur  []byte
}

func (o *memObject) Write(p []byte) error {
	for len(p) > 0 {
		if int64(len(o.cur)) == o.s.chunkSize {
			o.part++
			if err := o.s.Emit(o.obj, o.part, o.cur, false); err != nil {
				return err
			}
			o.cur = nil
		}
		if o.cur == nil {
			buf, err := o.s.Acquire(context.Background())
			if err != nil {
				return err
			}
			o.cur = buf
		}
		n := min(int64(len(p)), o.s.chunkSize-int64(len(o.cur)))
		o.cur = append(o.cur, p[:n]...)
		p = p[n:]
	}
	return nil
}

func (o *memObject) WriteSection(Section) error {
	return fmt.Errorf("object %d: the sink takes no sections", o.obj)
}

func (o *memObject) Finish() error {
	o.part++
	err := o.s.Emit(o.obj, o.part, o.cur, true)
	o.cur = nil
	return err
}

func (o *memObject) Abort() {
	if o.cur != nil {
		o.s.Release(o.cur)
		o.cur = nil
	}
}

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "payload", Type: arrow.BinaryTypes.String},
}, nil)

// rows builds a batch of ids [lo, lo+n) with incompressible-ish payloads.
func rows(mem memory.Allocator, lo, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for i := lo; i < lo+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%x-%d", uint64(i)*0x9E3779B97F4A7C15, i))
	}
	return b.NewRecordBatch()
}

func opts(partitions int) Options {
	return Options{
		Partitions:       partitions,
		FrameTargetBytes: 64 << 10,
		CoalesceBudget:   512 << 10,
		Encoders:         2,
		Compression:      frame.LZ4,
	}
}

// decodeAll reads back every frame of res from the sink, checking CRCs,
// and returns the ids per partition in frame order.
func decodeAll(t *testing.T, s *memSink, res Result) map[int][]int64 {
	t.Helper()
	got := map[int][]int64{}
	objects := map[int][]byte{}
	for i, f := range res.Frames {
		if objects[f.Object] == nil {
			objects[f.Object] = s.object(f.Object)
		}
		b := objects[f.Object][f.Offset : f.Offset+f.Length]
		if store.CRC32C(b) != f.CRC32C {
			t.Fatalf("frame %d: CRC mismatch", i)
		}
		recs, err := frame.Decode(b, res.Schema, memory.DefaultAllocator)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		var n int64
		for _, r := range recs {
			ids := r.Column(0).(*array.Int64)
			for j := 0; j < ids.Len(); j++ {
				got[f.Partition] = append(got[f.Partition], ids.Value(j))
			}
			n += r.NumRows()
			r.Release()
		}
		if n != f.Rows {
			t.Fatalf("frame %d: index says %d rows, decoded %d", i, f.Rows, n)
		}
	}
	return got
}

func TestChunksAndFrames(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	sink := newSink(t, 100_000, 4)
	w, err := New(context.Background(), opts(8), sink)
	if err != nil {
		t.Fatal(err)
	}
	const total = 40_000
	want := map[int][]int64{}
	for lo := 0; lo < total; lo += 100 {
		rec := rows(mem, lo, 100)
		p := (lo / 100) % 8
		if err := w.Write(p, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		for i := lo; i < lo+100; i++ {
			want[p] = append(want[p], int64(i))
		}
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != total {
		t.Fatalf("rows = %d", res.Rows)
	}
	if len(res.Objects) != 1 {
		t.Fatalf("%d objects, want 1", len(res.Objects))
	}
	obj := res.Objects[0]
	if got := int64(len(sink.object(0))); got != obj.Size {
		t.Fatalf("stored %d bytes, index says %d", got, obj.Size)
	}
	if obj.Parts != 0 {
		t.Fatalf("parts = %d, want 0: the uploader chooses them", obj.Parts)
	}
	if !sink.last[0] || sink.created != 1 {
		t.Fatalf("%d objects created, finished %v: want one, finished", sink.created, sink.last[0])
	}
	if store.CRC32C(sink.object(0)) != obj.CRC32C {
		t.Fatal("object CRC mismatch")
	}
	// Frames tile the object exactly, in order.
	var off int64
	for i, f := range res.Frames {
		if f.Offset != off {
			t.Fatalf("frame %d at %d, want %d", i, f.Offset, off)
		}
		off += f.Length
	}
	if off != obj.Size {
		t.Fatalf("frames cover %d of %d bytes", off, obj.Size)
	}
	got := decodeAll(t, sink, res)
	for p := range 8 {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: rows differ or out of order (%d vs %d rows)", p, len(got[p]), len(want[p]))
		}
	}
	// Coalescing: 100-row inputs became frames near the 64 KiB target.
	if n := len(res.Frames); n > total/100/4 {
		t.Fatalf("%d frames for %d small batches: not coalesced", n, total/100)
	}
	if sink.peak > 4 {
		t.Fatalf("peak %d buffers, budget 4", sink.peak)
	}
	mem.AssertSize(t, 0)
}

func TestCloseFlushesInPartitionOrder(t *testing.T) {
	sink := newSink(t, 100_000, 2)
	w, _ := New(context.Background(), opts(5), sink)
	for _, p := range []int{4, 2, 0, 3, 1} {
		rec := rows(memory.DefaultAllocator, p*10, 10)
		w.Write(p, rec)
		rec.Release()
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range res.Frames {
		if f.Partition != i {
			t.Fatalf("frame %d holds partition %d; close must flush in partition order", i, f.Partition)
		}
	}
	if len(sink.objects[0]) != 1 || !sink.last[0] {
		t.Fatalf("small output: %d chunks", len(sink.objects[0]))
	}
}

func TestLargeBatchIsSliced(t *testing.T) {
	sink := newSink(t, 100_000, 4)
	o := opts(1)
	w, _ := New(context.Background(), o, sink)
	rec := rows(memory.DefaultAllocator, 0, 50_000) // ~1.7 MB logical
	size := frame.LogicalSize(rec)
	if err := w.Write(0, rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Frames) < int(size/(2*o.FrameTargetBytes)) {
		t.Fatalf("%d frames for %d bytes at a %d-byte target", len(res.Frames), size, o.FrameTargetBytes)
	}
	for i, f := range res.Frames {
		if f.Bytes > 2*o.FrameTargetBytes {
			t.Fatalf("frame %d holds %d logical bytes, target %d", i, f.Bytes, o.FrameTargetBytes)
		}
	}
	got := decodeAll(t, sink, res)
	if len(got[0]) != 50_000 || got[0][49_999] != 49_999 {
		t.Fatalf("rows lost: %d", len(got[0]))
	}
}

func TestObjectRollover(t *testing.T) {
	sink := newSink(t, 100_000, 4)
	o := opts(4)
	o.MaxObjectSize = 250_000
	w, _ := New(context.Background(), o, sink)
	for lo := 0; lo < 60_000; lo += 500 {
		rec := rows(memory.DefaultAllocator, lo, 500)
		w.Write((lo/500)%4, rec)
		rec.Release()
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Objects) < 2 {
		t.Fatalf("%d objects; want rollover past 250000 bytes", len(res.Objects))
	}
	for i, obj := range res.Objects {
		if obj.Size > o.MaxObjectSize || int64(len(sink.object(i))) != obj.Size || !sink.last[i] {
			t.Fatalf("object %d: %d bytes, stored %d", i, obj.Size, len(sink.object(i)))
		}
	}
	if got := decodeAll(t, sink, res); len(got[0])+len(got[1])+len(got[2])+len(got[3]) != 60_000 {
		t.Fatal("rows lost across objects")
	}
}

func TestBadInput(t *testing.T) {
	sink := newSink(t, 100_000, 2)
	w, _ := New(context.Background(), opts(4), sink)
	rec := rows(memory.DefaultAllocator, 0, 3)
	defer rec.Release()
	if err := w.Write(4, rec); !errors.Is(err, ErrPartition) {
		t.Fatalf("partition 4 of 4: %v", err)
	}
	if err := w.Write(-1, rec); !errors.Is(err, ErrPartition) {
		t.Fatalf("partition -1: %v", err)
	}
	w.Write(0, rec)
	other := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int32}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, other)
	b.Field(0).(*array.Int32Builder).Append(1)
	bad := b.NewRecordBatch()
	defer bad.Release()
	if err := w.Write(1, bad); !errors.Is(err, ErrSchema) {
		t.Fatalf("schema change: %v", err)
	}
	w.Close()
	if err := w.Write(0, rec); err == nil {
		t.Fatal("write after close succeeded")
	}
}

func TestFailUnblocksWriters(t *testing.T) {
	sink := newSink(t, 100_000, 1) // one buffer: writers soon block
	sink.limit <- struct{}{}       // ... and it is taken
	w, _ := New(context.Background(), opts(2), sink)
	errc := make(chan error, 1)
	go func() {
		for lo := 0; ; lo += 1000 {
			rec := rows(memory.DefaultAllocator, lo, 1000)
			err := w.Write(0, rec)
			rec.Release()
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	boom := errors.New("part 3 failed: 403 AccessDenied")
	w.Fail(boom)
	if err := <-errc; !errors.Is(err, boom) {
		t.Fatalf("blocked Write returned %v, want the failure", err)
	}
	if err := w.Write(0, rows(memory.DefaultAllocator, 0, 1)); !errors.Is(err, boom) {
		t.Fatalf("later Write returned %v", err)
	}
	w.Abort(boom)
}

func TestConcurrentWriters(t *testing.T) {
	sink := newSink(t, 100_000, 3)
	w, _ := New(context.Background(), opts(16), sink)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				lo := (g*50 + i) * 64
				rec := rows(memory.DefaultAllocator, lo, 64)
				if err := w.Write(lo%16, rec); err != nil {
					t.Error(err)
				}
				rec.Release()
			}
		}()
	}
	wg.Wait()
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, ids := range decodeAll(t, sink, res) {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("id %d twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != 8*50*64 {
		t.Fatalf("%d rows back, want %d", len(seen), 8*50*64)
	}
}

// TestSortedRuns fills the coalesce budget several times over with small
// batches spread over many partitions: every run is flushed in partition
// order (so each partition's frames of one run are neighbours of the
// next partition's), a partition has about one frame per run however
// many batches it got, and the memory the writer counts never passes the
// budget. Only Write adds to what the writer counts (the frame index
// included: Write reserves it before it flushes a run, and the appender
// fills what was reserved), so checking after each Write sees the most
// it ever held, however the encoders and the appender are scheduled; the
// index the writer returns has the capacity it counted.
func TestSortedRuns(t *testing.T) {
	const partitions = 300
	sink := newSink(t, 100_000, 4)
	o := opts(partitions)
	w, err := New(context.Background(), o, sink)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]int64{}
	var writes int
	// 45,000 rows: about 3,000 frames, whose index entries (64 bytes
	// each, kept until Close) leave most of the budget for rows; once
	// they leave less than an eighth the writer fails
	// (TestIndexFillsBudget).
	for lo := 0; lo < 45_000; lo += 4 {
		p := (lo * 7919 / 4) % partitions
		rec := rows(memory.DefaultAllocator, lo, 4)
		if err := w.Write(p, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		writes++
		for i := lo; i < lo+4; i++ {
			want[p] = append(want[p], int64(i))
		}
		w.b.mu.Lock()
		used := w.co.buffered + w.b.pending + w.b.fixed
		flushed, counted := w.co.flushed, w.b.indexCap
		w.b.mu.Unlock()
		if used > o.CoalesceBudget+4<<10 {
			t.Fatalf("after %d writes the writer holds %d bytes, budget %d", writes, used, o.CoalesceBudget)
		}
		if counted < flushed {
			t.Fatalf("after %d writes %d frames are flushed but the writer counts index entries for %d", writes, flushed, counted)
		}
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	w.b.mu.Lock()
	fixed := w.b.fixed
	w.b.mu.Unlock()
	if want := int64(partitions)*pbufSize + int64(cap(res.Frames))*entrySize; fixed != want {
		t.Fatalf("the writer counts %d bytes of fixed state, its %d partitions and index of capacity %d take %d", fixed, partitions, cap(res.Frames), want)
	}
	if res.Runs < 3 {
		t.Fatalf("%d runs for %d bytes of rows under a %d-byte budget", res.Runs, res.Bytes, o.CoalesceBudget)
	}
	// Frames come in runs: partitions ascending, then again from a lower one.
	runs := 1
	for i := 1; i < len(res.Frames); i++ {
		if res.Frames[i].Partition < res.Frames[i-1].Partition {
			runs++
		}
	}
	if runs != res.Runs {
		t.Fatalf("frames form %d ascending runs, the writer says %d", runs, res.Runs)
	}
	if max := res.Runs * partitions; len(res.Frames) > max {
		t.Fatalf("%d frames from %d writes: more than one per partition per run (%d)", len(res.Frames), writes, max)
	}
	got := decodeAll(t, sink, res)
	for p := range partitions {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: %d rows back, want %d in write order", p, len(got[p]), len(want[p]))
		}
	}
}

// TestTooManyPartitions: a partition count whose fixed state alone
// would take half the budget is refused, naming both numbers.
func TestTooManyPartitions(t *testing.T) {
	o := opts(1 << 20)
	_, err := New(context.Background(), o, newSink(t, testChunk, 2))
	if !errors.Is(err, errBudget) || !strings.Contains(err.Error(), "1048576 partitions") || !strings.Contains(err.Error(), "coalesce_budget (524288 bytes)") {
		t.Fatalf("New with 2^20 partitions and a 512 KiB budget: %v", err)
	}
}

// TestIndexFillsBudget: a writer whose frame index (kept until Close)
// leaves less than an eighth of coalesce_budget for rows fails with
// errBudget, naming the frames, the index's bytes and the budget, instead
// of flushing a run at every few writes; until then its runs stay large,
// and after the failure every buffer is back.
func TestIndexFillsBudget(t *testing.T) {
	const partitions = 300
	sink := newSink(t, 100_000, 4)
	o := opts(partitions)
	w, err := New(context.Background(), o, sink)
	if err != nil {
		t.Fatal(err)
	}
	var writes int
	var werr error
	for lo := 0; lo < 1_000_000 && werr == nil; lo += 4 {
		rec := rows(memory.DefaultAllocator, lo, 4)
		werr = w.Write((lo*7919/4)%partitions, rec)
		rec.Release()
		writes++
	}
	// The error is raised when Write flushes a run whose index would
	// not fit (not later, as its frames are appended): a Write returns it.
	w.Abort(werr)
	if !errors.Is(werr, errBudget) {
		t.Fatalf("after %d writes: %v, want errBudget", writes, werr)
	}
	for _, want := range []string{"frame index takes", "of coalesce_budget (524288 bytes) for rows, less than 65536", "300 partitions", "raise coalesce_budget"} {
		if !strings.Contains(werr.Error(), want) {
			t.Fatalf("error %q does not say %q", werr, want)
		}
	}
	w.b.mu.Lock()
	runs := w.co.runs
	w.b.mu.Unlock()
	// Each run took at least an eighth of the budget of rows: no run
	// per write.
	if runs > writes/40 {
		t.Fatalf("%d runs in %d writes before the failure", runs, writes)
	}
	sink.mu.Lock()
	held := sink.held
	sink.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d chunk buffers still held after the failure", held)
	}
}

// TestLargeBatchAfterCopiedRows: a partition's rows stay in input order
// when a batch large enough to be retained fills a frame while frames of
// copied rows (small batches, or small shares of scattered ones) wait for
// their run: the full frame of retained rows waits behind them rather
// than go to the encoders first. Spill off and on, by Write and by
// WritePartitioned.
func TestLargeBatchAfterCopiedRows(t *testing.T) {
	mem := memory.DefaultAllocator
	for _, sorted := range []bool{false, true} {
		for _, scatter := range []bool{false, true} {
			t.Run(fmt.Sprintf("spill=%v/scatter=%v", sorted, scatter), func(t *testing.T) {
				o := opts(2)
				var w *Writer
				var sink *memSink
				if sorted {
					w, sink = newSorted(t, o, openSpill(t, 1<<30))
				} else {
					sink = newSink(t, 100_000, 4)
					var err error
					if w, err = New(context.Background(), o, sink); err != nil {
						t.Fatal(err)
					}
				}
				write := func(rec arrow.RecordBatch, into []int32) {
					t.Helper()
					var err error
					if scatter {
						err = w.WritePartitioned(rec, into)
					} else {
						err = w.Write(int(into[0]), rec)
					}
					rec.Release()
					if err != nil {
						t.Fatal(err)
					}
				}
				// Small writes copied into the arena: more than a frame's
				// worth for partition 0, which waits for the run.
				id := 0
				for range 700 {
					n := 4
					into := make([]int32, n)
					if scatter {
						// Most rows to partition 1: partition 0's share of
						// each batch is small, so it is copied.
						n = 40
						into = make([]int32, n)
						for i := range into {
							into[i] = 1
						}
						into[0] = 0
					}
					write(rows(mem, id, n), into)
					id += n
				}
				// One batch whose rows nearly all go to partition 0:
				// retained, and a full frame by itself.
				into := make([]int32, 4000)
				if scatter {
					into[3999] = 1
				}
				write(rows(mem, id, 4000), into)
				res, err := w.Close()
				if err != nil {
					t.Fatal(err)
				}
				got := decodeAll(t, sink, res)
				for p, ids := range got {
					for i := 1; i < len(ids); i++ {
						if ids[i] < ids[i-1] {
							t.Fatalf("partition %d: row %d (id %d) follows id %d: rows out of input order", p, i, ids[i], ids[i-1])
						}
					}
				}
				if len(got[0]) < 4000 {
					t.Fatalf("partition 0 holds %d rows, want at least 4000", len(got[0]))
				}
			})
		}
	}
}
