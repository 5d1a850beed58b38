package storesuite

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// Target is a store under test, as the suite needs to reach it.
type Target struct {
	// Name is the store's, for messages ("s3", "azure", "gcs").
	Name string
	// Ops names the store's requests as its counter (and the fault
	// proxy) does.
	Ops Ops
	// Upstream is the URL a fault proxy forwards to, and Path what the
	// store's endpoint adds to the proxy's URL (Azure's "/account").
	Upstream, Path string
	// ServerTLS and UpstreamTLS, for an https Upstream, are what
	// faultproxy.StartTLS takes: the proxy's certificate (one the store
	// trusts) and the roots it trusts the upstream with.
	ServerTLS, UpstreamTLS *tls.Config
	// Open returns a raw store (no retries) on bucket, which may not
	// exist yet, at endpoint (Upstream+Path, or a proxy's URL+Path), its
	// requests counted in c. A stall above 0 is its first-byte and stall
	// timeout (FirstByteTimeout). Open closes what it opens when t ends.
	Open func(t *testing.T, endpoint, bucket string, c *store.Counter, stall time.Duration) store.Store
}

// Ops are the names of a store's requests: a single-object put, a part
// upload and a ranged read ("PutObject", "UploadPart", "GetObject" on S3;
// "PutBlob", "PutBlock", "GetBlob" on Azure; "objects.insert" twice and
// "objects.get" on GCS).
type Ops struct {
	Put, Part, Get string
}

// Run runs every case of the suite on tg, each on a bucket of its own
// and in parallel with the others.
func Run(t *testing.T, tg Target) {
	for _, g := range []struct {
		name string
		run  func(*testing.T, Target)
	}{{"roundtrip", RoundTrip}, {"lifecycle", Lifecycle}, {"hostile", Hostile}, {"faults", Faults}, {"stalls", Stalls}} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.run(t, tg)
		})
	}
}

// buckets numbers the suite's buckets within a test binary.
var buckets atomic.Int64

// bucketName is a fresh name valid on S3, Azure and GCS (3-63 of a-z,
// 0-9 and single dashes), starting "ds-" as every test bucket does (the
// test credentials and the clean-up of a run against AWS go by it).
func bucketName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("ds-suite-%d-%s", buckets.Add(1), hex.EncodeToString(b[:]))
}

// env is a client on a fresh bucket of the target, directly or through
// a fault proxy, and a direct store on the same bucket for checks.
type env struct {
	bucket  string
	client  *durashuffle.Client
	st      store.Store // the client's raw store
	direct  store.Store // the same bucket, no proxy
	counter *store.Counter
	proxy   *faultproxy.Proxy // nil without faults
}

// newEnv opens tg on a new bucket; with a non-nil spec, through a fault
// proxy with it (closed when t ends).
func newEnv(t *testing.T, tg Target, cfg durashuffle.Config, spec *faultproxy.Spec) *env {
	t.Helper()
	bucket := bucketName()
	ev := &env{bucket: bucket, counter: &store.Counter{}}
	ev.direct = tg.Open(t, tg.Upstream+tg.Path, bucket, nil, 0)
	mk, ok := ev.direct.(store.BucketMaker)
	if !ok {
		t.Fatalf("%s store %T cannot create a bucket", tg.Name, ev.direct)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := mk.EnsureBucket(ctx); err != nil {
		t.Fatalf("create bucket %s on %s: %v", bucket, tg.Name, err)
	}
	ev.st = ev.direct
	if spec != nil {
		p, err := faultproxy.StartTLS(tg.Upstream, *spec, tg.ServerTLS, tg.UpstreamTLS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.Close(); err != nil {
				t.Errorf("close fault proxy: %v", err)
			}
		})
		ev.proxy = p
		ev.st = tg.Open(t, p.URL()+tg.Path, bucket, ev.counter, 0)
	} else {
		ev.st = tg.Open(t, tg.Upstream+tg.Path, bucket, ev.counter, 0)
	}
	ev.client = testenv.Client(t, cfg, durashuffle.WithStore(ev.st), durashuffle.WithCounter(ev.counter))
	t.Cleanup(ev.client.Close)
	return ev
}

// config is small enough to be quick and large enough that a worker of
// the suite's shape uploads several parts: 5 MiB chunks (S3's minimum),
// 4 MiB runs, quick retries.
func config(t *testing.T, spill string) durashuffle.Config {
	cfg := durashuffle.DefaultConfig()
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Write.UploadConcurrency = 4
	cfg.Write.MaxBufferedChunks = 6
	cfg.Write.FrameTargetBytes = 256 * durashuffle.KiB
	cfg.Write.CoalesceBudget = 4 * durashuffle.MiB
	cfg.Write.Spill = spill
	cfg.Write.SpillDir = t.TempDir()
	cfg.Read.RangeBytes = 2 * durashuffle.MiB
	cfg.Store.RetryBaseDelay = durashuffle.Duration(5 * time.Millisecond)
	cfg.Store.RetryMaxDelay = durashuffle.Duration(200 * time.Millisecond)
	// Enough attempts that the throttled run's rate limit, which answers
	// most of a burst "slow down", is paced, not given up on.
	cfg.Store.RetryMaxAttempts = 20
	cfg.Store.RequestTimeout = durashuffle.Duration(time.Minute)
	return cfg
}

// Rows of the suite: a worker, a partition, a sequence number within
// (worker, partition) and 1 KiB of incompressible bytes drawn from the
// three, so stored size tracks rows and a row read back is checked whole.
var schema = arrow.NewSchema([]arrow.Field{
	{Name: "w", Type: arrow.PrimitiveTypes.Int32},
	{Name: "p", Type: arrow.PrimitiveTypes.Int32},
	{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
	{Name: "pad", Type: arrow.BinaryTypes.Binary},
}, nil)

const padBytes = 1024

// row is one row as the suite checks it; the pad is checked on reading.
type row struct {
	W, P int32
	Seq  int64
}

// pad is the row's padding: xorshift from its key.
func pad(r row, b []byte) []byte {
	x := uint64(r.W)<<48 ^ uint64(r.P)<<32 ^ uint64(r.Seq) ^ 0x9E3779B97F4A7C15
	for i := 0; i < padBytes; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for j := range 8 {
			b[i+j] = byte(x >> (8 * j))
		}
	}
	return b
}

// shape is what a stage's workers write: batches of batchRows rows,
// round robin over the partitions, each worker in its own order.
type shape struct {
	workers, partitions, rows, batchRows int
}

// small is the suite's usual stage: 2 workers of ~6 MiB each (two 5 MiB
// parts) over 6 partitions.
var small = shape{workers: 2, partitions: 6, rows: 6000, batchRows: 100}

// writeWorker writes worker w's rows of sh to wr and returns them by
// partition, in write order.
func writeWorker(wr *durashuffle.Writer, sh shape, w int) ([][]row, error) {
	out := make([][]row, sh.partitions)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	buf := make([]byte, padBytes)
	for i := 0; i*sh.batchRows < sh.rows; i++ {
		p := (i*(w+1) + w) % sh.partitions
		for range min(sh.batchRows, sh.rows-i*sh.batchRows) {
			r := row{int32(w), int32(p), int64(len(out[p]))}
			b.Field(0).(*array.Int32Builder).Append(r.W)
			b.Field(1).(*array.Int32Builder).Append(r.P)
			b.Field(2).(*array.Int64Builder).Append(r.Seq)
			b.Field(3).(*array.BinaryBuilder).Append(pad(r, buf))
			out[p] = append(out[p], r)
		}
		rec := b.NewRecordBatch()
		err := wr.Write(p, rec)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("worker %d, batch %d to partition %d: %w", w, i, p, err)
		}
	}
	return out, nil
}

// written is a stage's rows by worker and partition, in write order.
type written [][][]row

// partitionOrder is what ReadPartitions returns for ps (nil: all):
// partition ascending, then worker, then write order.
func (wr written) partitionOrder(ps []int) []row {
	var out []row
	for p := range wr[0] {
		if ps != nil && !slices.Contains(ps, p) {
			continue
		}
		for w := range wr {
			out = append(out, wr[w][p]...)
		}
	}
	return out
}

// writeStage has every worker of sh write and commit to query's stage
// (concurrently) and, if seal, seals it. It returns the rows written.
func writeStage(ctx context.Context, c *durashuffle.Client, query string, sh shape, seal bool) (written, error) {
	out := make(written, sh.workers)
	errs := make([]error, sh.workers)
	done := make(chan int)
	for w := range sh.workers {
		go func() {
			defer func() { done <- w }()
			wr, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: fmt.Sprint(w), Partitions: sh.partitions, Schema: schema})
			if err != nil {
				errs[w] = err
				return
			}
			if out[w], err = writeWorker(wr, sh, w); err != nil {
				errs[w] = errors.Join(err, wr.Abort())
				return
			}
			if _, err := wr.Commit(ctx); err != nil {
				errs[w] = fmt.Errorf("commit worker %d: %w", w, err)
			}
		}()
	}
	for range sh.workers {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if seal {
		if _, err := c.Seal(ctx, query, 0, sh.workers); err != nil {
			return nil, fmt.Errorf("seal %s: %w", query, err)
		}
	}
	return out, nil
}

// got is a read's rows, and the partition each batch was labelled with
// checked against its rows.
func collect(recs *reader.Records) ([]row, error) {
	defer recs.Release()
	var out []row
	buf := make([]byte, padBytes)
	for recs.Next() {
		rec := recs.RecordBatch()
		ws := rec.Column(0).(*array.Int32)
		ps := rec.Column(1).(*array.Int32)
		seqs := rec.Column(2).(*array.Int64)
		pads := rec.Column(3).(*array.Binary)
		for i := range int(rec.NumRows()) {
			r := row{ws.Value(i), ps.Value(i), seqs.Value(i)}
			if int(r.P) != recs.Partition() {
				return out, fmt.Errorf("row %+v came in a batch of partition %d", r, recs.Partition())
			}
			if string(pads.Value(i)) != string(pad(r, buf)) {
				return out, fmt.Errorf("row %+v: its %d bytes of padding are not the ones written", r, len(pads.Value(i)))
			}
			out = append(out, r)
		}
	}
	return out, recs.Err()
}

// sameRows fails t at the first row that differs.
func sameRows(t *testing.T, what string, got, want []row) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: row %d is %+v, want %+v", what, i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
}

// leftovers fails t for every upload left open in st and returns the
// keys of the objects it holds under prefix.
func leftovers(t *testing.T, st store.Store, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	ups, err := st.ListUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		t.Errorf("upload left open: %s (%s)", u.Key, u.UploadID)
	}
	objs, _, err := st.List(ctx, prefix, "")
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}
