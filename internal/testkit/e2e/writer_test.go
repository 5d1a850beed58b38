package e2e_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backends are the stores under test: the embedded server, a real MinIO
// and versitygw.
var backends = testenv.Backends()

// forEach runs f against every backend with a raw store and its counter.
func forEach(t *testing.T, f func(t *testing.T, st store.Store, counter *store.Counter)) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Start(t)
			st, counter := e.NewStore(t)
			f(t, st, counter)
		})
	}
}

func testConfig() durashuffle.Config {
	cfg := durashuffle.DefaultConfig()
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Write.UploadConcurrency = 4
	cfg.Write.MaxBufferedChunks = 6
	cfg.Write.FrameTargetBytes = 256 * durashuffle.KiB
	// Runs of 4 MiB: a test's few MiB of rows are encoded and uploaded
	// while it writes, not all at Commit.
	cfg.Write.CoalesceBudget = 4 * durashuffle.MiB
	cfg.Store.RetryBaseDelay = durashuffle.Duration(10 * time.Millisecond)
	return cfg
}

// uploadingConfig is testConfig with spill off: each run is uploaded as
// it flushes, for tests of what happens to uploads while a writer still
// takes input (with spill on, nothing is uploaded before Commit).
func uploadingConfig() durashuffle.Config {
	cfg := testConfig()
	cfg.Write.Spill = "off"
	return cfg
}

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "blob", Type: arrow.BinaryTypes.Binary},
}, nil)

// batch returns rows [lo, lo+n) with ~1 KiB of incompressible bytes each,
// so stored size tracks logical size.
func batch(lo, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	blob := make([]byte, 1024)
	for i := lo; i < lo+n; i++ {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range blob {
			blob[j] = byte(r.Uint32())
		}
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.BinaryBuilder).Append(blob)
	}
	return b.NewRecordBatch()
}

// writeRows writes rows [0, n) in batches of 256 round-robin over
// partitions and returns the first error.
func writeRows(w *durashuffle.Writer, n, partitions int) error {
	for lo := 0; lo < n; lo += 256 {
		rec := batch(lo, min(256, n-lo))
		err := w.Write((lo/256)%partitions, rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func TestWriteCutsExactParts(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		before := probed(t, c)
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q1", Stage: 0, Worker: "0", Attempt: "a", Partitions: 8})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeRows(w, 20_000, 8); err != nil { // ~20 MiB
			t.Fatal(err)
		}
		m, err := w.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var wantParts int64
		for _, o := range m.Objects {
			wantParts += ceilDiv(o.Size, int64(cfg.Write.ChunkSize))
		}
		req := reqs.Diff(counter.Requests(), before)
		// Over HTTPS parts stream while their chunks fill, and an
		// object's last part, streamed with the chunk size as its length
		// before the chunk ended short, is cut off (no answer) and sent
		// again whole: at most one such request per object.
		cut := counter.Statuses()[store.OpStatus{Op: "UploadPart", Status: 0}]
		streams := store.StreamsParts(st)
		if maxCut := int64(len(m.Objects)); cut > 0 && !streams || cut > maxCut {
			t.Fatalf("%d UploadPart requests cut off (streaming %v), want at most %d when streaming, else none", cut, streams, maxCut)
		}
		if wantParts < 4 || req["UploadPart"]-cut != wantParts || int64(m.Totals.Parts) != wantParts {
			t.Fatalf("UploadPart requests %d (%d cut off), manifest parts %d, want ceil(size/chunk) summed = %d", req["UploadPart"], cut, m.Totals.Parts, wantParts)
		}
		if req["CreateMultipartUpload"] != 1 || req["CompleteMultipartUpload"] != 1 || req["PutObject"] != 1 {
			t.Fatalf("requests %v: want 1 create, 1 complete, 1 manifest put", req)
		}
		if m.Totals.Rows != 20_000 {
			t.Fatalf("manifest rows %d", m.Totals.Rows)
		}
		// Every frame's CRC32C matches the bytes a ranged GET returns.
		for i, f := range m.Frames {
			key := c.Layout().ObjectKey("q1", 0, m.Objects[f.Object].Key)
			body, err := st.GetRange(ctx, key, f.Offset, f.Length)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(body)
			body.Close()
			if err != nil || int64(len(b)) != f.Length {
				t.Fatalf("frame %d: read %d of %d bytes: %v", i, len(b), f.Length, err)
			}
			if got := store.CRC32C(b); got != f.CRC32C {
				t.Fatalf("frame %d of %s at %d: CRC32C %08x, manifest says %08x", i, key, f.Offset, got, f.CRC32C)
			}
		}
		ups, err := st.ListUploads(ctx, "")
		if err != nil || len(ups) != 0 {
			t.Fatalf("open uploads after commit: %v %v", ups, err)
		}
	})
}

func TestSmallOutputIsOnePut(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		before := probed(t, c)
		w, _ := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q1", Stage: 3, Worker: "7", Partitions: 4})
		if err := writeRows(w, 1000, 4); err != nil {
			t.Fatal(err)
		}
		m, err := w.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := reqs.Diff(counter.Requests(), before)
		if req["PutObject"] != 2 || req["UploadPart"] != 0 || req["CreateMultipartUpload"] != 0 {
			t.Fatalf("requests %v: want one data PutObject and one manifest PutObject", req)
		}
		if len(m.Objects) != 1 || m.Objects[0].Parts != 1 {
			t.Fatalf("objects %+v", m.Objects)
		}
		objs, _, err := st.List(ctx, c.Layout().StagePrefix("q1", 3), "")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, o := range objs {
			keys = append(keys, strings.TrimPrefix(o.Key, c.Layout().StagePrefix("q1", 3)))
		}
		want := regexp.MustCompile(`^\[worker-7/attempt-` + regexp.QuoteMeta(m.Attempt) + `/data-[0-9a-f]{16}-0\.arrows worker-7/manifest\.json\]$`)
		if !want.MatchString(fmt.Sprint(keys)) || m.Objects[0].Key != keys[0] {
			t.Fatalf("objects %v (manifest names %s), want them to match %v", keys, m.Objects[0].Key, want)
		}
	})
}

func TestEmptyOutputCommits(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		before := probed(t, c)
		w, _ := c.NewWriter(context.Background(), durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 2, Schema: schema})
		m, err := w.Commit(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		req := reqs.Diff(counter.Requests(), before)
		if len(m.Objects) != 0 || len(m.Frames) != 0 || fmt.Sprint(req) != "map[PutObject:1]" {
			t.Fatalf("empty output: %+v, requests %v", m.Totals, req)
		}
	})
}

// slowStore delays every part upload, like a congested link.
type slowStore struct {
	store.Store
	delay time.Duration
}

func (s slowStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	time.Sleep(s.delay)
	return s.Store.UploadPart(ctx, key, id, n, body)
}

func TestMemoryBoundWhileStoreIsSlow(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		// Spill off: runs go to the pool's chunk buffers as they flush,
		// which is what the bound holds (a spilled writer's object is
		// uploaded from its file at Commit and takes no chunk buffer).
		cfg := uploadingConfig()
		cfg.Write.UploadConcurrency = 2
		cfg.Write.MaxBufferedChunks = 3
		c := testenv.Client(t, cfg, durashuffle.WithStore(slowStore{st, 150 * time.Millisecond}), durashuffle.WithCounter(counter))
		defer c.Close()
		w, _ := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 4})
		if err := writeRows(w, 40_000, 4); err != nil { // ~40 MiB, 8 chunks
			t.Fatal(err)
		}
		m, err := w.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		peak := c.Stats().PeakBuffered
		if peak > 3 || peak < 2 {
			t.Fatalf("peak chunk buffers %d, bound 3", peak)
		}
		if m.Totals.Parts < 8 {
			t.Fatalf("only %d parts: the test did not outrun the budget", m.Totals.Parts)
		}
	})
}

// badChecksumStore corrupts the checksum of one part, so the server
// rejects it: a real permanent (4xx) failure.
type badChecksumStore struct {
	store.Store
	part  int32
	parts atomic.Int32
}

func (s *badChecksumStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	s.parts.Add(1)
	if sum, ok := body.CRC32C(); n == s.part && ok {
		body = body.WithCRC32C(sum ^ 0xdeadbeef)
	}
	return s.Store.UploadPart(ctx, key, id, n, body)
}

func TestPermanentPartFailureCancelsWriter(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := uploadingConfig()
		bad := &badChecksumStore{Store: st, part: 2}
		c := testenv.Client(t, cfg, durashuffle.WithStore(bad), durashuffle.WithCounter(counter))
		defer c.Close()
		w, _ := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 4})
		const total = 200_000 // ~200 MiB if nothing stopped it
		err := writeRows(w, total, 4)
		if err == nil {
			t.Fatal("all writes succeeded after a part was rejected")
		}
		var se *store.Error
		if !errors.As(err, &se) || se.Retryable || se.Status/100 != 4 {
			t.Fatalf("Write error %v: want the server's 4xx rejection", err)
		}
		if !strings.Contains(err.Error(), "part 2") {
			t.Fatalf("error does not name the part: %v", err)
		}
		if n := bad.parts.Load(); n > 20 {
			t.Fatalf("%d parts sent: the failure did not stop the writer promptly", n)
		}
		if counter.Retries()[store.OpReason{Op: "UploadPart", Reason: retryReason(se)}] != 0 {
			t.Fatalf("a permanent failure was retried: %v", counter.Retries())
		}
		if _, err := w.Commit(ctx); err == nil {
			t.Fatal("commit succeeded")
		}
		ups, err := st.ListUploads(ctx, "")
		if err != nil || len(ups) != 0 {
			t.Fatalf("uploads left open: %v %v", ups, err)
		}
		objs, _, _ := st.List(ctx, "", "")
		if len(objs) != 0 {
			t.Fatalf("objects left: %v", objs)
		}
	})
}

func retryReason(se *store.Error) string {
	if se.Code != "" {
		return se.Code
	}
	return fmt.Sprintf("HTTP%d", se.Status)
}

// noStore is a store whose every method panics (a nil Store inside).
type noStore struct{ store.Store }

func TestInvalidIDsRejectedBeforeAnyRequest(t *testing.T) {
	counter := &store.Counter{}
	// Any request on this store panics: nothing may be sent.
	c := testenv.Client(t, testConfig(), durashuffle.WithStore(noStore{}), durashuffle.WithCounter(counter))
	defer c.Close()
	cases := []struct {
		name string
		opt  durashuffle.WriterOptions
		want string
	}{
		{"empty query", durashuffle.WriterOptions{Worker: "0", Partitions: 1}, "query ID is empty"},
		{"dotdot worker", durashuffle.WriterOptions{Query: "q", Worker: "..", Partitions: 1}, `worker ID ".." is not allowed`},
		{"slash", durashuffle.WriterOptions{Query: "a/b", Worker: "0", Partitions: 1}, `query ID "a/b"`},
		{"too long", durashuffle.WriterOptions{Query: strings.Repeat("q", 129), Worker: "0", Partitions: 1}, "129 characters, at most 128"},
		{"negative stage", durashuffle.WriterOptions{Query: "q", Stage: -1, Worker: "0", Partitions: 1}, "stage -1 is negative"},
		{"no partitions", durashuffle.WriterOptions{Query: "q", Worker: "0"}, "partitions must be between 1 and"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.NewWriter(context.Background(), tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	if counter.Total() != 0 {
		t.Fatalf("%d requests made", counter.Total())
	}
}

// holdStore holds CompleteMultipartUpload or UploadPart (from the first
// part numbered part on) until the request's context ends, and signals
// when the first one is held.
type holdStore struct {
	store.Store
	complete bool  // hold CompleteMultipartUpload
	part     int32 // hold UploadPart of parts >= part (0: none)
	held     chan struct{}
	once     atomic.Bool
}

func (s *holdStore) hold(ctx context.Context) error {
	if s.once.CompareAndSwap(false, true) {
		close(s.held)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *holdStore) CompleteMultipart(ctx context.Context, key, id string, parts []store.Part) error {
	if s.complete {
		return s.hold(ctx)
	}
	return s.Store.CompleteMultipart(ctx, key, id, parts)
}

func (s *holdStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	if s.part > 0 && n >= s.part {
		return store.Part{}, s.hold(ctx)
	}
	return s.Store.UploadPart(ctx, key, id, n, body)
}

// TestCommitContextBoundsTheCommit: the ctx given to Commit, not the one
// given to NewWriter, bounds every request of the commit. Cancelled while
// the store holds CompleteMultipartUpload, or while parts are still in
// flight, Commit returns the cancellation, nothing is committed, no
// upload is left open and no object is left.
func TestCommitContextBoundsTheCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold func(st store.Store) *holdStore
	}{
		{"complete", func(st store.Store) *holdStore {
			return &holdStore{Store: st, complete: true, held: make(chan struct{})}
		}},
		{"parts in flight", func(st store.Store) *holdStore { return &holdStore{Store: st, part: 3, held: make(chan struct{})} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
				hs := tc.hold(st)
				c := testenv.Client(t, testConfig(), durashuffle.WithStore(hs), durashuffle.WithCounter(counter))
				defer c.Close()
				w, err := c.NewWriter(context.Background(), durashuffle.WriterOptions{Query: "q", Worker: "0", Attempt: "a", Partitions: 4})
				if err != nil {
					t.Fatal(err)
				}
				// ~12 MiB: three 5 MiB parts, the last of them sent at Commit.
				if err := writeRows(w, 12_000, 4); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					<-hs.held
					cancel()
				}()
				m, err := w.Commit(ctx)
				if err == nil || !errors.Is(err, context.Canceled) {
					t.Fatalf("Commit = %v, %v; want the cancellation", m, err)
				}
				if !hs.once.Load() {
					t.Fatal("the store never held a request: the test did not reach the commit's requests")
				}
				bg := context.Background()
				if _, err := manifest.LoadWorker(bg, st, c.Layout(), "q", 0, "0"); !store.IsNotFound(err) {
					t.Fatalf("worker manifest after a cancelled commit: %v, want not found", err)
				}
				ups, err := st.ListUploads(bg, "")
				if err != nil || len(ups) != 0 {
					t.Fatalf("uploads left open: %v %v", ups, err)
				}
				objs, _, err := st.List(bg, "", "")
				if err != nil || len(objs) != 0 {
					t.Fatalf("objects left: %v %v", objs, err)
				}
			})
		})
	}
}

// TestCompressionAuto writes through a store slow enough that the upload
// pool's buffers run out (the link is the bottleneck). With spill off,
// where frames are appended to the upload as they are encoded,
// compression auto moves frames from lz4 to zstd. With spill on, a
// writer's frames are encoded before its upload starts at Commit, where
// auto has seen no upload wait: they may all stay lz4. Either way the
// manifest counts frames per codec, and every row reads back whatever
// its frame's codec.
func TestCompressionAuto(t *testing.T) {
	e := backends[0].Start(t)
	for _, spill := range []string{"off", "on"} {
		t.Run("spill="+spill, func(t *testing.T) {
			st, counter := e.NewStore(t)
			ctx := context.Background()
			cfg := testConfig()
			cfg.Write.Spill = spill
			cfg.Write.Compression = "auto"
			cfg.Write.UploadConcurrency = 2
			cfg.Write.MaxBufferedChunks = 3
			c := testenv.Client(t, cfg, durashuffle.WithStore(slowStore{st, 300 * time.Millisecond}), durashuffle.WithCounter(counter))
			defer c.Close()
			query := "auto-" + spill
			w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: 4})
			if err != nil {
				t.Fatal(err)
			}
			const rows = 40_000
			if err := writeRows(w, rows, 4); err != nil {
				t.Fatal(err)
			}
			m, err := w.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sum := 0
			for codec, n := range m.Codecs {
				if codec != "lz4" && codec != "zstd" && codec != "zstd-fastest" && codec != "none" {
					t.Errorf("frames of codec %q", codec)
				}
				sum += n
			}
			if m.Compression != "auto" || sum != m.Totals.Frames || spill == "off" && m.Codecs["zstd"]+m.Codecs["zstd-fastest"] == 0 {
				t.Fatalf("compression %q, frames %d, codecs %v: want auto, every frame counted, and with spill off zstd frames among them", m.Compression, m.Totals.Frames, m.Codecs)
			}
			t.Logf("spill %s: codecs %v", spill, m.Codecs)
			if _, err := c.Seal(ctx, query, 0, 1); err != nil {
				t.Fatal(err)
			}
			s, err := c.OpenStage(ctx, query, 0)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := s.ReadStored(ctx, []int{0, 1, 2, 3})
			if err != nil {
				t.Fatal(err)
			}
			defer recs.Close()
			var got int64
			for recs.Next() {
				got += recs.RecordBatch().NumRows()
			}
			if err := recs.Err(); err != nil || got != rows {
				t.Fatalf("read %d rows (%v), want %d", got, err, rows)
			}
		})
	}
}

// TestChecksumNone: with checksum none, uploads are created without a
// checksum algorithm and parts and puts carry no CRC32C (nor stream with
// one in a trailer); a multipart write commits and reads back on every
// server (frames are still checked against the manifest's CRC32C).
func TestChecksumNone(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ep := b.Start(t)
			ctx := context.Background()
			cfg := testConfig()
			cfg.Write.Checksum = "none"
			cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle, cfg.Store.CAFile, cfg.Store.InsecureSkipVerify = ep.Bucket, ep.URL, ep.PathStyle, ep.CAFile, ep.Insecure
			cfg.Store.Region = cmp.Or(ep.Region, "us-east-1")
			var opts []durashuffle.Option
			if ep.AccessKeyID != "" {
				opts = append(opts, durashuffle.WithCredentials(credentials.NewStaticCredentialsProvider(ep.AccessKeyID, ep.SecretAccessKey, "")))
			}
			c, err := durashuffle.Open(ctx, cfg, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			m, rows := writeReadBack(t, c, "nosum", 12_000, 4)
			if m.Totals.Parts < 2 {
				t.Fatalf("%d parts: the test needs a multipart upload", m.Totals.Parts)
			}
			if rows != 12_000 {
				t.Fatalf("read %d rows, want 12000", rows)
			}
		})
	}
}

// writeReadBack writes rows [0, rows) as worker 0 of query's stage 0 over
// partitions, commits, and reads every partition back; it returns the
// worker manifest and the rows read.
func writeReadBack(t *testing.T, c *durashuffle.Client, query string, rows, partitions int) (*manifest.Worker, int64) {
	t.Helper()
	ctx := context.Background()
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeRows(w, rows, partitions); err != nil {
		t.Fatal(err)
	}
	m, err := w.Commit(ctx)
	if err != nil {
		t.Fatalf("commit %s: %v", query, err)
	}
	return m, stageRows(t, c, query, partitions)
}

// stageRows opens stage 0 of query and counts the rows of its partitions
// [0, partitions), every batch read through ReadPartitions.
func stageRows(t *testing.T, c *durashuffle.Client, query string, partitions int) int64 {
	t.Helper()
	all := make([]int, partitions)
	for i := range all {
		all[i] = i
	}
	return readRows(t, c, query, all)
}

// zeroBatch is rows [lo, lo+n) of batch's schema whose blobs are 1 KiB
// of zeros: they compress to almost nothing.
func zeroBatch(lo, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	blob := make([]byte, 1024)
	for i := lo; i < lo+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.BinaryBuilder).Append(blob)
	}
	return b.NewRecordBatch()
}

// TestCompressibleOutputIsOnePut: a writer that takes in more than two
// chunks of input whose output then fits well under one chunk stores it
// as a single put, over HTTPS too (the uploader creates no multipart
// upload before the object's bytes call for one). Every row reads back
// and no upload is left open.
func TestCompressibleOutputIsOnePut(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		before := probed(t, c)
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "zeros", Worker: "0", Partitions: 4})
		if err != nil {
			t.Fatal(err)
		}
		const rows = 12_000 // 12 MiB in, more than 2 x chunk_size (5 MiB)
		for lo := 0; lo < rows; lo += 256 {
			rec := zeroBatch(lo, min(256, rows-lo))
			err := w.Write((lo/256)%4, rec)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		m, err := w.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Objects) != 1 || m.Objects[0].Parts != 1 || m.Objects[0].Size >= int64(cfg.Write.ChunkSize) {
			t.Fatalf("objects %+v: want one object of one part under a chunk", m.Objects)
		}
		req := reqs.Diff(counter.Requests(), before)
		want := "map[PutObject:2]" // the data object and the manifest
		if fmt.Sprint(req) != want {
			t.Fatalf("requests %v, want %s", req, want)
		}
		if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Fatalf("open uploads after commit: %v %v", ups, err)
		}
		if n := stageRows(t, c, "zeros", 4); n != rows {
			t.Fatalf("read back %d of %d rows", n, rows)
		}
	})
}

// TestFrameIndexFillsBudget: a writer of many partitions on a small
// coalesce_budget whose frame index would leave too little of it for rows
// fails with "coalesce budget too small", naming the budget, while a part is in
// flight (streamed over HTTPS); Commit then returns that error and leaves
// no object and no open upload, and the client closes. A writer its
// caller leaves behind after such a failure, neither committed nor
// aborted, does not hold Client.Close either: the part streaming from its
// chunk is cut off.
func TestFrameIndexFillsBudget(t *testing.T) {
	fill := func(t *testing.T, c *durashuffle.Client, query string) *durashuffle.Writer {
		t.Helper()
		w, err := c.NewWriter(context.Background(), durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: 4096})
		if err != nil {
			t.Fatal(err)
		}
		var werr error
		rec := batch(0, 2) // 2 KiB of rows: one small frame per partition per run
		for i := 0; i < 40*4096 && werr == nil; i++ {
			werr = w.Write(i%4096, rec)
		}
		rec.Release()
		if werr == nil || !strings.HasPrefix(werr.Error(), "coalesce budget too small") || !strings.Contains(werr.Error(), "of coalesce_budget (1048576 bytes) for rows") {
			t.Fatalf("writes: %v, want ErrBudget naming coalesce_budget", werr)
		}
		return w
	}
	closes := func(t *testing.T, c *durashuffle.Client) {
		t.Helper()
		done := make(chan struct{})
		go func() { c.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Client.Close still waiting 30 s after the writer failed")
		}
	}
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		cfg.Write.FrameTargetBytes = 4 * durashuffle.KiB
		cfg.Write.CoalesceBudget = 1 * durashuffle.MiB
		c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		w := fill(t, c, "index")
		if _, err := w.Commit(ctx); err == nil || !strings.Contains(err.Error(), "coalesce budget too small") {
			t.Fatalf("commit after the failure: %v, want the budget's failure", err)
		}
		objs, _, err := st.List(ctx, c.Layout().StagePrefix("index", 0), "")
		if err != nil || len(objs) != 0 {
			t.Fatalf("objects left: %v %v", objs, err)
		}
		if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Fatalf("open uploads left: %v %v", ups, err)
		}
		closes(t, c)

		left := testenv.Client(t, cfg, durashuffle.WithStore(st))
		fill(t, left, "left")
		closes(t, left)
	})
}
