package reader_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/storesuite"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// forEachBackend runs fn against the embedded server, MinIO and
// versitygw (or the server named by DURASHUFFLE_TEST_ENDPOINT).
func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, newEnv(t, b.Start(t))) })
	}
}

// env is a client on a fresh bucket, with the raw store (no retries) for
// damaging objects behind the reader's back.
type env struct {
	client  *durashuffle.Client
	raw     store.Store
	counter *store.Counter
}

func newEnv(t *testing.T, ep testenv.Endpoint) *env {
	// Go's transport dials spare connections for concurrent requests and
	// parks the unused ones; a server shutting down waits 5 s for such a
	// connection that never sent a request. Closing them first (cleanups
	// run last-registered first) keeps the tests fast.
	hc := &http.Client{Transport: ep.Transport(t)}
	t.Cleanup(hc.CloseIdleConnections)
	counter := new(store.Counter)
	o := ep.Options(counter)
	o.HTTPClient = hc
	raw, err := s3store.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket = ep.Bucket
	cfg.Store.Prefix = "rt"
	// Small frames, so a few thousand rows make dozens of frames.
	cfg.Write.FrameTargetBytes = 4 * durashuffle.KiB
	// Room for the per-partition state of the 4096-partition stage.
	cfg.Write.CoalesceBudget = 1 * durashuffle.MiB
	cfg.Store.RetryBaseDelay = durashuffle.Duration(time.Millisecond)
	cfg.Store.RetryMaxDelay = durashuffle.Duration(10 * time.Millisecond)
	c := testenv.Client(t, cfg, durashuffle.WithStore(raw), durashuffle.WithCounter(counter))
	t.Cleanup(c.Close)
	return &env{client: c, raw: raw, counter: counter}
}

var e2eSchema = arrow.NewSchema([]arrow.Field{
	{Name: "w", Type: arrow.PrimitiveTypes.Int32},
	{Name: "p", Type: arrow.PrimitiveTypes.Int32},
	{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
	{Name: "s", Type: arrow.BinaryTypes.String},
}, nil)

type row struct {
	W, P int32
	Seq  int64
	S    string
}

func label(w, p int32, seq int64) string { return fmt.Sprintf("w%d/p%d/%d", w, p, seq) }

// writeStage has workers "0".."workers-1" each write rounds of 40-row
// batches to every partition except the empty ones, in a different
// partition order per worker, commits them and (if seal) seals the
// stage. It returns the rows in the documented order: partition, worker,
// write order.
func writeStage(t *testing.T, e *env, query string, stage, workers, partitions, rounds int, empty map[int]bool, seal bool) []row {
	t.Helper()
	ctx := context.Background()
	mem := memory.NewGoAllocator()
	written := make([][][]row, workers) // [worker][partition]
	for w := range workers {
		written[w] = make([][]row, partitions)
		wr, err := e.client.NewWriter(ctx, durashuffle.WriterOptions{
			Query: query, Stage: stage, Worker: fmt.Sprint(w), Partitions: partitions, Schema: e2eSchema})
		if err != nil {
			t.Fatal(err)
		}
		for r := range rounds {
			for i := range partitions {
				p := (i*(w+1) + r) % partitions // each worker its own interleaving
				if empty[p] {
					continue
				}
				b := array.NewRecordBuilder(mem, e2eSchema)
				for range 40 {
					seq := int64(len(written[w][p]))
					b.Field(0).(*array.Int32Builder).Append(int32(w))
					b.Field(1).(*array.Int32Builder).Append(int32(p))
					b.Field(2).(*array.Int64Builder).Append(seq)
					b.Field(3).(*array.StringBuilder).Append(label(int32(w), int32(p), seq))
					written[w][p] = append(written[w][p], row{int32(w), int32(p), seq, label(int32(w), int32(p), seq)})
				}
				rec := b.NewRecordBatch()
				b.Release()
				if err := wr.Write(p, rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
		}
		if _, err := wr.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if seal {
		if _, err := e.client.Seal(ctx, query, stage, workers); err != nil {
			t.Fatal(err)
		}
	}
	var order []row
	for p := range partitions {
		for w := range workers {
			order = append(order, written[w][p]...)
		}
	}
	return order
}

func collect(t *testing.T, recs *reader.Records) ([]row, error) {
	t.Helper()
	var out []row
	for recs.Next() {
		rec := recs.RecordBatch()
		w := rec.Column(0).(*array.Int32)
		p := rec.Column(1).(*array.Int32)
		seq := rec.Column(2).(*array.Int64)
		s := rec.Column(3).(*array.String)
		if rec.NumRows() > 0 && int(p.Value(0)) != recs.Partition() {
			t.Fatalf("batch of partition %d reported as partition %d", p.Value(0), recs.Partition())
		}
		for i := range int(rec.NumRows()) {
			out = append(out, row{w.Value(i), p.Value(i), seq.Value(i), s.Value(i)})
		}
	}
	return out, recs.Err()
}

func equalRows(t *testing.T, got, want []row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func open(t *testing.T, e *env, query string, stage int, o reader.Options) *reader.Stage {
	t.Helper()
	s, err := reader.Open(context.Background(), e.client.Store(), e.client.Layout(), query, stage, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func read(t *testing.T, recs *reader.Records, err error) []row {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	got, err := collect(t, recs)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		order := writeStage(t, e, "rt", 1, 3, 5, 6, map[int]bool{3: true}, true)
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		s := open(t, e, "rt", 1, reader.Options{Mem: mem})
		if !s.Manifest().Sealed || len(s.Manifest().Workers) != 3 {
			t.Fatalf("manifest: sealed %v, %d workers", s.Manifest().Sealed, len(s.Manifest().Workers))
		}
		if s.Manifest().Totals.Frames < 20 {
			t.Fatalf("only %d frames; the test wants many", s.Manifest().Totals.Frames)
		}
		if !s.Schema().Equal(e2eSchema) {
			t.Fatalf("schema %s", s.Schema())
		}

		recs, err := s.ReadPartitions(ctx, nil)
		equalRows(t, read(t, recs, err), order)

		for _, ps := range [][]int{{4, 0}, {2}, {3}, {1, 2, 3, 4}} {
			in := map[int32]bool{}
			for _, p := range ps {
				in[int32(p)] = true
			}
			var want []row
			for _, r := range order {
				if in[r.P] {
					want = append(want, r)
				}
			}
			recs, err := s.ReadPartitions(ctx, ps)
			equalRows(t, read(t, recs, err), want)
		}

		// An unsealed stage reads the same through its worker manifests.
		order2 := writeStage(t, e, "rt", 2, 2, 3, 3, nil, false)
		s2 := open(t, e, "rt", 2, reader.Options{RangeBytes: 4096, ReadAhead: 2})
		if s2.Manifest().Sealed {
			t.Fatal("stage 2 should not be sealed")
		}
		recs, err = s2.ReadPartitions(ctx, nil)
		equalRows(t, read(t, recs, err), order2)
	})
}

// TestReadStored reads in storage order: the same rows as ReadPartitions,
// each batch labelled with its partition, worker by worker and each
// partition's rows in write order, in one GET per data object where
// ReadPartitions needs one per run of a partition's frames.
func TestReadStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		order := writeStage(t, e, "stored", 1, 3, 5, 6, map[int]bool{3: true}, true)
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		s := open(t, e, "stored", 1, reader.Options{Mem: mem, GapBytes: -1})
		m := s.Manifest()
		indexGets := func(ps []int) int64 {
			fs, err := m.Frames(ctx, e.raw, e.client.Layout(), slices.Sorted(slices.Values(ps)))
			if err != nil {
				t.Fatal(err)
			}
			return int64(min(1, len(fs)))
		}

		byPart, err := s.ReadPartitions(ctx, nil)
		equalRows(t, read(t, byPart, err), order)

		for _, ps := range [][]int{nil, {4, 0}, {2}, {3}} {
			in := map[int32]bool{}
			for _, p := range ps {
				in[int32(p)] = true
			}
			var want []row
			for _, r := range order {
				if ps == nil || in[r.P] {
					want = append(want, r)
				}
			}
			wantIndex := indexGets(ps)
			before := e.counter.Requests()
			recs, err := s.ReadStored(ctx, ps)
			got := read(t, recs, err)
			if d := reqs.Diff(e.counter.Requests(), before); d["GetObject"] != int64(recs.Ranges())+wantIndex || len(d) > 1 {
				t.Errorf("partitions %v: %v, want %d GetObject (and one of the index)", ps, d, recs.Ranges())
			}
			if len(got) != len(want) {
				t.Fatalf("partitions %v: %d rows, want %d", ps, len(got), len(want))
			}
			// Worker by worker; within a worker and partition, in write
			// order; every row exactly once.
			seen := map[row]bool{}
			next := map[[2]int32]int64{}
			lastW := int32(-1)
			for i, r := range got {
				if r.W < lastW {
					t.Fatalf("partitions %v: row %d %+v after worker %d's rows", ps, i, r, lastW)
				}
				lastW = r.W
				if k := [2]int32{r.W, r.P}; r.Seq != next[k] {
					t.Fatalf("partitions %v: row %d %+v, want seq %d of worker %d partition %d", ps, i, r, next[k], r.W, r.P)
				} else {
					next[k]++
				}
				seen[r] = true
			}
			for _, r := range want {
				if !seen[r] {
					t.Fatalf("partitions %v: row %+v missing", ps, r)
				}
			}
			t.Logf("partitions %v: %d rows in %d GETs (objects %d, by partition %d)", ps, len(got), recs.Ranges(), m.Totals.Objects, byPart.Ranges())
			if ps == nil && recs.Ranges() != m.Totals.Objects {
				t.Errorf("whole stage in %d GETs, want one per data object (%d); ReadPartitions took %d",
					recs.Ranges(), m.Totals.Objects, byPart.Ranges())
			}
		}
		if _, err := s.ReadStored(ctx, []int{5}); !errors.Is(err, reader.ErrPartition) {
			t.Errorf("partition 5 of 5: %v, want ErrPartition", err)
		}
	})
}

// frameRows returns the row ranges of the stage's frames in delivery
// order, from the manifest.
func frameRows(m *manifest.Stage) [][2]int64 {
	var out [][2]int64
	var at int64
	for p := range m.Partitions {
		for _, w := range m.Workers {
			for _, f := range w.Frames {
				if f.Partition == p {
					out = append(out, [2]int64{at, at + f.Rows})
					at += f.Rows
				}
			}
		}
	}
	return out
}

func TestReadResultsPaging(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		order := writeStage(t, e, "pages", 0, 2, 3, 6, nil, true)
		total := int64(len(order))
		// RangeBytes of 1 puts every frame in a GET of its own, so the
		// GET count is exactly the number of frames a page needs.
		s := open(t, e, "pages", 0, reader.Options{RangeBytes: 1, SpanBytes: 1}) // a GET per frame
		full, err := reader.WithFrames(ctx, e.raw, e.client.Layout(), s.Manifest())
		if err != nil {
			t.Fatal(err)
		}
		frames := frameRows(full)
		if len(frames) < 10 {
			t.Fatalf("only %d frames", len(frames))
		}
		// A page that starts and ends inside frames, far from the start.
		mid := frames[len(frames)/2]
		pages := []struct{ off, lim int64 }{
			{0, 10},
			{frames[1][0] - 3, 7},             // across a frame boundary
			{mid[0] + 1, mid[1] - mid[0] + 5}, // inside one frame into the next
			{frames[len(frames)-3][0] + 2, -1},
			{total - 1, 100},
			{total, 10},
		}
		for _, pg := range pages {
			t.Run(fmt.Sprintf("offset=%d,limit=%d", pg.off, pg.lim), func(t *testing.T) {
				end := total
				if pg.lim >= 0 {
					end = min(total, pg.off+pg.lim)
				}
				need := 0
				for _, f := range frames {
					if f[0] < end && f[1] > pg.off {
						need++
					}
				}
				before := e.counter.Requests()
				recs, err := s.ReadResults(ctx, pg.off, pg.lim)
				got := read(t, recs, err)
				equalRows(t, got, order[min(pg.off, total):max(min(pg.off, total), end)])
				diff := reqs.Diff(e.counter.Requests(), before)
				// One GET of the index, then one per frame of the page.
				if diff["GetObject"] != 1+int64(need) || len(diff) > 1 && need > 0 || recs.Ranges() != need {
					t.Errorf("requests %v, %d ranges planned; page needs %d frames and the index", diff, recs.Ranges(), need)
				}
			})
		}

		// With default options neighbours coalesce: never more GETs than
		// frames, and the same rows.
		s = open(t, e, "pages", 0, reader.Options{})
		before := e.counter.Requests()
		recs, err := s.ReadResults(ctx, 5, 300)
		equalRows(t, read(t, recs, err), order[5:305])
		if n := reqs.Diff(e.counter.Requests(), before)["GetObject"]; n != 1+int64(recs.Ranges()) || n < 2 {
			t.Errorf("%d GETs, %d ranges planned", n, recs.Ranges())
		}
	})
}

// TestDamagedObject runs the store suite's hostile cases on every S3
// backend: a data object with a flipped byte or cut short, a worker or
// stage manifest tampered with, each refused by name (the frame's key,
// offset and partition) after exactly the rows before it.
func TestDamagedObject(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { storesuite.Hostile(t, storesuite.S3(t, b.Start(t))) })
	}
}

func TestRequestBudget(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		order := writeStage(t, e, "budget", 0, 3, 4, 4, nil, true)
		before := e.counter.Requests()
		s := open(t, e, "budget", 0, reader.Options{})
		if d := reqs.Diff(e.counter.Requests(), before); len(d) != 1 || d["GetObject"] != 1 {
			t.Fatalf("opening a sealed stage cost %v, want exactly one GetObject", d)
		}
		recs, err := s.ReadPartitions(ctx, nil)
		equalRows(t, read(t, recs, err), order)
		d := reqs.Diff(e.counter.Requests(), before)
		if len(d) != 1 || d["GetObject"] != 2+int64(recs.Ranges()) {
			t.Errorf("reading every partition cost %v, want only GetObject: 1 manifest + 1 index + %d ranges", d, recs.Ranges())
		}
		if frames := s.Manifest().Totals.Frames; recs.Ranges() > frames || recs.Ranges() < 1 {
			t.Errorf("%d ranges for %d frames", recs.Ranges(), frames)
		}
		t.Logf("%d frames in %d ranged GETs", s.Manifest().Totals.Frames, recs.Ranges())
	})
}

func TestEmptyStage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		order := writeStage(t, e, "empty", 0, 2, 4, 0, nil, true)
		if len(order) != 0 {
			t.Fatal("wrote rows")
		}
		before := e.counter.Requests()
		s := open(t, e, "empty", 0, reader.Options{})
		if !s.Schema().Equal(e2eSchema) {
			t.Errorf("schema %s", s.Schema())
		}
		recs, err := s.ReadPartitions(ctx, nil)
		if got := read(t, recs, err); len(got) != 0 {
			t.Errorf("%d rows from an empty stage", len(got))
		}
		recs, err = s.ReadResults(ctx, 0, 10)
		if got := read(t, recs, err); len(got) != 0 {
			t.Errorf("%d rows from an empty stage", len(got))
		}
		if d := reqs.Diff(e.counter.Requests(), before); d["GetObject"] != 1 || len(d) != 1 {
			t.Errorf("requests %v, want the manifest GET only", d)
		}
		if _, err := s.ReadPartitions(ctx, []int{9}); !errors.Is(err, reader.ErrPartition) {
			t.Errorf("partition 9 of 4: err = %v", err)
		}
	})
}

// byteCounter counts GETs and the bytes their bodies deliver.
type byteCounter struct {
	store.Store
	gets, bytes atomic.Int64
}

func (b *byteCounter) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	b.gets.Add(1)
	rc, err := b.Store.GetRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	return countingBody{rc, &b.bytes}, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestWideStageOnePartition: reading one partition of a sealed stage of
// 16 workers x 4096 partitions on MinIO transfers at most 256 KiB in at
// most 24 GETs, data included: the stage manifest, one ranged GET of the
// index and the partition's frames, not the stage's metadata. With
// -short it runs at 16 x 512 (the race detector's run), the same bounds.
func TestWideStageOnePartition(t *testing.T) {
	partitions := 4096
	if testing.Short() {
		partitions = 512
	}
	t.Run("minio", func(t *testing.T) {
		e := newEnv(t, testenv.MinIO(t))
		ctx := context.Background()
		const workers, p = 16, 234
		order := writeStage(t, e, "wide", 0, workers, partitions, 1, nil, true)
		var want []row
		for _, r := range order {
			if r.P == p {
				want = append(want, r)
			}
		}
		bc := &byteCounter{Store: e.client.Store()}
		s, err := reader.Open(ctx, bc, e.client.Layout(), "wide", 0, reader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := s.ReadPartitions(ctx, []int{p})
		equalRows(t, read(t, recs, err), want)
		gets, moved := bc.gets.Load(), bc.bytes.Load()
		t.Logf("partition %d of %d x %d: %d GETs (%d ranges of data), %d bytes; %d frames in the stage", p, workers, partitions, gets, recs.Ranges(), moved, s.Manifest().Totals.Frames)
		if gets > 24 || moved > 256<<10 {
			t.Fatalf("%d GETs and %d bytes, want at most 24 and 256 KiB", gets, moved)
		}
	})
}

// TestPartitionRangeGets: 8 readers each read a range of 32 of a stage's
// 256 partitions, as a downstream stage reads coalesced partitions. Each
// worker's frames of a range lie together in each of its sorted runs, so
// a range costs about one GET per worker object and run (plus the two
// metadata GETs), not one per frame, and the rows still come in
// partition, worker and write order.
func TestPartitionRangeGets(t *testing.T) {
	e := newEnv(t, testenv.MinIO(t))
	ctx := context.Background()
	const workers, partitions, readers = 4, 256, 8
	order := writeStage(t, e, "ranges", 0, workers, partitions, 8, nil, true)
	var total, frames int64
	for k := range readers {
		lo, hi := k*partitions/readers, (k+1)*partitions/readers
		var ps []int
		var want []row
		for p := lo; p < hi; p++ {
			ps = append(ps, p)
		}
		for _, r := range order {
			if int(r.P) >= lo && int(r.P) < hi {
				want = append(want, r)
			}
		}
		bc := &byteCounter{Store: e.client.Store()}
		s, err := reader.Open(ctx, bc, e.client.Layout(), "ranges", 0, reader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := s.ReadPartitions(ctx, ps)
		equalRows(t, read(t, recs, err), want)
		total += bc.gets.Load()
		frames = int64(s.Manifest().Totals.Frames)
		if gets, runs := bc.gets.Load(), sortedRuns(t, e, s); gets > 2+runs {
			t.Fatalf("partitions [%d, %d): %d GETs, want at most 2 + one per sorted run of a worker (%d)", lo, hi, gets, runs)
		}
	}
	t.Logf("%d range readers of a %d x %d stage with %d frames: %d GETs in all", readers, workers, partitions, frames, total)
	if total*8 > frames {
		t.Fatalf("%d GETs for %d frames: ranges are not read in runs", total, frames)
	}
}

// sortedRuns counts the stage's sorted runs: stretches of each object's
// frames, in storage order, whose partitions do not decrease.
func sortedRuns(t *testing.T, e *env, s *reader.Stage) int64 {
	t.Helper()
	fs, err := s.Manifest().Frames(context.Background(), e.client.Store(), e.client.Layout(), nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(fs, func(a, b manifest.Frame) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Object, b.Object), cmp.Compare(a.Offset, b.Offset))
	})
	var runs int64
	for i, f := range fs {
		if i == 0 || f.Worker != fs[i-1].Worker || f.Object != fs[i-1].Object || f.Partition < fs[i-1].Partition {
			runs++
		}
	}
	return runs
}
