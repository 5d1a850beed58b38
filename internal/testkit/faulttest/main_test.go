package faulttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// onMinIO runs f as subtest "minio" on a fresh bucket of the real server
// (the name is how scripts/gotest.sh counts MinIO-backed tests).
func onMinIO(t *testing.T, f func(t *testing.T, e testenv.Endpoint)) {
	t.Run("minio", func(t *testing.T) { f(t, testenv.MinIO(t)) })
}

// baseConfig is small enough to be quick and large enough that every
// worker's output is a real multipart upload (5 MiB parts, S3's minimum).
func baseConfig() durashuffle.Config {
	cfg := durashuffle.DefaultConfig()
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Write.UploadConcurrency = 4
	cfg.Write.MaxBufferedChunks = 8
	cfg.Write.FrameTargetBytes = 512 * durashuffle.KiB
	cfg.Read.RangeBytes = 2 * durashuffle.MiB
	cfg.Store.RetryBaseDelay = durashuffle.Duration(10 * time.Millisecond)
	cfg.Store.RetryMaxDelay = durashuffle.Duration(200 * time.Millisecond)
	cfg.Store.RequestTimeout = durashuffle.Duration(time.Minute)
	return cfg
}

// env is a client whose every request goes through fault proxies to
// MinIO, and a direct store on the same bucket for checks the faults must
// not disturb.
type env struct {
	proxies []*faultproxy.Proxy // proxies[0] faces the client
	client  *durashuffle.Client
	counter *store.Counter
	direct  store.Store
}

// newEnv chains one proxy per spec in front of e (the first spec's proxy
// faces the client) and builds a client on them.
func newEnv(t testing.TB, e testenv.Endpoint, cfg durashuffle.Config, specs ...faultproxy.Spec) *env {
	t.Helper()
	ev := &env{}
	target := e.URL
	for i := len(specs) - 1; i >= 0; i-- {
		// Each proxy speaks what the endpoint speaks: over TLS, the
		// client's parts stream with aws-chunked bodies and trailing
		// checksums, and the faults meet that path.
		p, err := faultproxy.StartTLS(target, specs[i], e.ServerTLS(t), e.Transport(t).TLSClientConfig)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.Close(); err != nil {
				t.Errorf("close fault proxy: %v", err)
			}
		})
		ev.proxies = append([]*faultproxy.Proxy{p}, ev.proxies...)
		target = p.URL()
	}
	ev.counter = &store.Counter{}
	o := e.Options(ev.counter)
	o.Endpoint = target
	raw, err := s3store.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ev.client = testenv.Client(t, cfg, durashuffle.WithStore(raw), durashuffle.WithCounter(ev.counter))
	t.Cleanup(ev.client.Close)
	ev.direct, _ = e.NewStore(t)
	return ev
}

// faults sums the proxies' stats; requests are those the client sent
// (the first proxy's).
func (ev *env) faults() faultproxy.Stats {
	var st faultproxy.Stats
	for i, p := range ev.proxies {
		s := p.Stats()
		if i > 0 {
			s.Requests = nil
		}
		st = st.Add(s)
	}
	return st
}

// stage describes a stage of lineitem rows split over workers by row
// range and over partitions by order key, as a shuffle's map side would.
type stage struct {
	query      string
	workers    int
	partitions int
	rows       int64
	seed       uint64
	attempt    string // empty: a fresh attempt ID per writer
	// reuse makes each worker generate its first input batch only and
	// write it again for the rest of its rows: the same bytes on the wire
	// for a fraction of the CPU, for tests about requests rather than data.
	reuse bool
}

// write runs every worker of the stage concurrently, commits each and
// seals the stage. It returns the digest of every partition as written.
func (s stage) write(ctx context.Context, c *durashuffle.Client) ([]demo.Digest, error) {
	digests, errs := s.writeWorkers(ctx, c)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if _, err := c.Seal(ctx, s.query, 0, s.workers); err != nil {
		return nil, fmt.Errorf("seal %s: %w", s.query, err)
	}
	return merge(digests), nil
}

// writeWorkers runs every worker to its commit, independently: one that
// fails does not stop the others. It returns each worker's digests per
// partition and its error.
func (s stage) writeWorkers(ctx context.Context, c *durashuffle.Client) ([][]demo.Digest, []error) {
	gen := demo.Generator{Seed: s.seed}
	digests := make([][]demo.Digest, s.workers)
	errs := make([]error, s.workers)
	var wg sync.WaitGroup
	for w, r := range demo.Ranges(s.rows, s.workers) {
		digests[w] = make([]demo.Digest, s.partitions)
		wg.Go(func() { errs[w] = s.writeWorker(ctx, c, gen, w, r, digests[w]) })
	}
	wg.Wait()
	return digests, errs
}

// merge adds up per-worker digests per partition.
func merge(perWorker [][]demo.Digest) []demo.Digest {
	var out []demo.Digest
	for _, ds := range perWorker {
		if out == nil {
			out = make([]demo.Digest, len(ds))
		}
		for p, d := range ds {
			out[p].Merge(d)
		}
	}
	return out
}

func (s stage) writeWorker(ctx context.Context, c *durashuffle.Client, gen demo.Generator, w int, r demo.Range, digests []demo.Digest) error {
	wr, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: s.query, Stage: 0, Worker: fmt.Sprint(w), Attempt: s.attempt, Partitions: s.partitions})
	if err != nil {
		return err
	}
	b, err := demo.NewBatcher(gen, s.partitions, nil)
	if err != nil {
		return err
	}
	defer b.Release()
	var (
		kept   []demo.Part
		keptDg []demo.Digest
	)
	defer func() {
		for _, part := range kept {
			part.Record.Release()
		}
	}()
	for _, in := range demo.Chunks(r, batchRows) {
		var parts []demo.Part
		switch {
		case !s.reuse:
			parts = b.Batch(in, digests)
		case kept == nil:
			keptDg = make([]demo.Digest, s.partitions)
			kept = b.Batch(in, keptDg)
			fallthrough
		default:
			if in.Len() != batchRows {
				break // the remainder: not worth a batch of its own
			}
			parts = kept
			for p, d := range keptDg {
				digests[p].Merge(d)
			}
		}
		for _, part := range parts {
			if err == nil {
				err = wr.Write(part.Partition, part.Record)
			}
			if !s.reuse {
				part.Record.Release()
			}
		}
		if err != nil {
			return errors.Join(fmt.Errorf("worker %d: %w", w, err), wr.Abort())
		}
	}
	if _, err := wr.Commit(ctx); err != nil {
		return fmt.Errorf("commit worker %d: %w", w, err)
	}
	return nil
}

// read streams every partition of the stage back and returns their
// digests. A row in the wrong partition is an error.
func (s stage) read(ctx context.Context, c *durashuffle.Client) ([]demo.Digest, error) {
	st, err := c.OpenStage(ctx, s.query, 0)
	if err != nil {
		return nil, err
	}
	return s.readStage(ctx, st)
}

func (s stage) readStage(ctx context.Context, st *reader.Stage) ([]demo.Digest, error) {
	got := make([]demo.Digest, s.partitions)
	for p := range s.partitions {
		rr, err := st.ReadPartitions(ctx, []int{p})
		if err != nil {
			return nil, err
		}
		for rr.Next() {
			if err := demo.Check(rr.RecordBatch(), p, s.partitions, &got[p]); err != nil {
				rr.Release()
				return nil, err
			}
		}
		err = rr.Err()
		rr.Release()
		if err != nil {
			return nil, fmt.Errorf("read partition %d: %w", p, err)
		}
	}
	return got, nil
}

// batchRows is the size of a worker's input batches.
const batchRows = 8192

// lost counts rows written but not read back, plus rows read back that
// were never written or differ, per partition: |rows| plus one row for a
// partition whose content hash differs with the same count.
func lost(want, got []demo.Digest) int64 {
	var n int64
	if len(got) != len(want) {
		got = make([]demo.Digest, len(want)) // nothing was read
	}
	for p := range want {
		d := want[p].Rows - got[p].Rows
		if d < 0 {
			d = -d
		}
		if d == 0 && want[p].Sum != got[p].Sum {
			d = 1
		}
		n += d
	}
	return n
}
