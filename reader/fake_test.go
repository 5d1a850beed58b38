package reader

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/testkit/leaktest"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// memStore is an in-memory store.Reader that behaves like S3 for ranged
// GETs (a range past the end is ErrInvalidRange, a range that runs past
// it is cut short) and records what was asked of it.
type memStore struct {
	mu       sync.Mutex
	objs     map[string][]byte
	gets     int
	inFlight int
	peak     int
	delay    time.Duration // per GET, to make overlap observable
	block    bool          // GETs wait for their context to end
	// stallAt: a GET's body stops after this many bytes of the object
	// until resume is closed (or the GET's context ends); 0: never.
	stallAt int64
	resume  chan struct{}
}

// stalledBody is a body that stops at byte stall of its bytes until
// resume is closed or ctx ends.
type stalledBody struct {
	ctx    context.Context
	b      []byte
	stall  int
	resume chan struct{}
	pos    int
}

func (s *stalledBody) Read(p []byte) (int, error) {
	if s.pos == s.stall {
		select {
		case <-s.resume:
		case <-s.ctx.Done():
			return 0, s.ctx.Err()
		}
	}
	if s.pos >= len(s.b) {
		return 0, io.EOF
	}
	end := len(s.b)
	if s.pos < s.stall {
		end = s.stall
	}
	n := copy(p, s.b[s.pos:end])
	s.pos += n
	return n, nil
}

func (s *stalledBody) Close() error { return nil }

func (m *memStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	m.mu.Lock()
	m.gets++
	m.inFlight++
	m.peak = max(m.peak, m.inFlight)
	b, ok := m.objs[key]
	delay, block := m.delay, m.block
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.inFlight--
		m.mu.Unlock()
	}()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if !ok {
		return nil, &store.Error{Op: "GetObject", Key: key, Status: 404, Err: store.ErrNotFound}
	}
	if off >= int64(len(b)) {
		return nil, &store.Error{Op: "GetObject", Key: key, Status: 416, Err: store.ErrInvalidRange}
	}
	end := min(off+length, int64(len(b)))
	m.mu.Lock()
	stallAt, resume := m.stallAt, m.resume
	m.mu.Unlock()
	if stallAt > off && stallAt < end {
		return &stalledBody{ctx: ctx, b: b[off:end], stall: int(stallAt - off), resume: resume}, nil
	}
	return io.NopCloser(bytes.NewReader(b[off:end])), nil
}

func (m *memStore) stats() (gets, peak int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gets, m.peak
}

// row is one row of the test schema: who wrote it, for which partition,
// and its position in that writer's partition.
type row struct {
	W, P int32
	Seq  int64
}

var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "w", Type: arrow.PrimitiveTypes.Int32},
	{Name: "p", Type: arrow.PrimitiveTypes.Int32},
	{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
}, nil)

func makeBatch(mem memory.Allocator, w, p int32, seq0 int64, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, testSchema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int32Builder).Append(w)
		b.Field(1).(*array.Int32Builder).Append(p)
		b.Field(2).(*array.Int64Builder).Append(seq0 + int64(i))
	}
	return b.NewRecordBatch()
}

// fspec is a frame to write: rows of partition P into object Obj;
// Raw: uncompressed whatever the worker's compression, as a writer
// stores a frame that its codec does not shrink.
type fspec struct {
	P, Rows, Obj int
	Raw          bool
}

const testQuery, testStage = "q1", 3

var testLayout = manifest.Layout{Prefix: "t"}

// buildStage writes frames for each worker (IDs "0", "1", ... in this
// order) into a memStore and returns it with the stage manifest and the
// rows in documented delivery order.
func buildStage(t testing.TB, partitions int, compression string, workers [][]fspec) (*memStore, *manifest.Stage, []row) {
	t.Helper()
	mem := memory.NewGoAllocator()
	st := &memStore{objs: map[string][]byte{}}
	schemaBytes, err := frame.EncodeSchema(testSchema)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest.Stage{FormatVersion: manifest.FormatVersion, Kind: "stage", Query: testQuery,
		Stage: testStage, Partitions: partitions, Schema: schemaBytes, Sealed: true}
	written := map[[2]int][][]row{} // (worker, partition) -> frames' rows
	for wi, frames := range workers {
		id := fmt.Sprint(wi)
		w := manifest.Worker{FormatVersion: manifest.FormatVersion, Kind: manifest.KindWorker, Query: testQuery,
			Stage: testStage, Worker: id, Attempt: "a", Schema: schemaBytes, Compression: compression, Partitions: partitions}
		var objs []*bytes.Buffer
		seq := map[int]int64{}
		for _, f := range frames {
			for len(objs) <= f.Obj {
				objs = append(objs, new(bytes.Buffer))
			}
			rec := makeBatch(mem, int32(wi), int32(f.P), seq[f.P], f.Rows)
			var buf bytes.Buffer
			codec := compression
			if f.Raw {
				codec = frame.None
			}
			fst, err := frame.Encode(&buf, testSchema, []arrow.RecordBatch{rec}, codec, mem)
			if err != nil {
				t.Fatal(err)
			}
			rec.Release()
			var rows []row
			for i := range f.Rows {
				rows = append(rows, row{int32(wi), int32(f.P), seq[f.P] + int64(i)})
			}
			written[[2]int{wi, f.P}] = append(written[[2]int{wi, f.P}], rows)
			seq[f.P] += int64(f.Rows)
			w.Frames = append(w.Frames, manifest.Frame{Partition: f.P, Object: f.Obj, Offset: int64(objs[f.Obj].Len()),
				Length: int64(buf.Len()), Rows: int64(f.Rows), Bytes: fst.Bytes, CRC32C: store.CRC32C(buf.Bytes())})
			objs[f.Obj].Write(buf.Bytes())
		}
		for oi, b := range objs {
			rel := manifest.DataName(id, "a", "00000000000000ab", oi)
			w.Objects = append(w.Objects, manifest.Object{Key: rel, Size: int64(b.Len()), Parts: 1, CRC32C: store.CRC32C(b.Bytes())})
			st.objs[testLayout.ObjectKey(testQuery, testStage, rel)] = b.Bytes()
		}
		if err := w.Check("test worker " + id); err != nil {
			t.Fatal(err)
		}
		m.Workers = append(m.Workers, w)
	}
	var order []row
	for p := range partitions {
		for wi := range workers {
			for _, rows := range written[[2]int{wi, p}] {
				order = append(order, rows...)
			}
		}
	}
	return st, m, order
}

// collect drains recs, checking every batch against the stream's schema.
func collect(t testing.TB, recs *Records) ([]row, error) {
	t.Helper()
	var out []row
	for recs.Next() {
		rec := recs.RecordBatch()
		if !rec.Schema().Equal(recs.Schema()) {
			t.Fatalf("batch schema %s, stream schema %s", rec.Schema(), recs.Schema())
		}
		if rec.NumRows() == 0 {
			t.Fatal("empty batch delivered")
		}
		w := rec.Column(0).(*array.Int32)
		p := rec.Column(1).(*array.Int32)
		s := rec.Column(2).(*array.Int64)
		for i := range int(rec.NumRows()) {
			out = append(out, row{w.Value(i), p.Value(i), s.Value(i)})
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

// noLeak fails t if goroutines started after base are still running a
// moment after the stream was closed.
func noLeak(t *testing.T, base int) {
	t.Helper()
	leaktest.Settled(t, base)
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("error %v does not contain %q", err, p)
		}
	}
}
