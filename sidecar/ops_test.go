package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/sidecar"
	"github.com/durashuffle/durashuffle/store"
)

// scrape GETs /metrics and parses the text exposition.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mf
}

// sum adds the values of a family's samples whose labels include match
// (histograms: their counts).
func sum(mf map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	f := mf[name]
	if f == nil {
		return 0
	}
	var total float64
next:
	for _, m := range f.Metric {
		for k, v := range match {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetrics: /metrics shows the upload, request and read metrics moving
// after a DoPut and a DoGet; /healthz and /readyz answer.
func TestMetrics(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	ctx := context.Background()
	if code, body := get(t, e.httpURL+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	waitReady(t, e)

	before := scrape(t, e.httpURL)
	for _, name := range []string{metrics.UploadQueueChunks, metrics.UploadQueuedSeconds, metrics.UploadPartSeconds,
		metrics.UploadBytesTotal, metrics.ReadBytesTotal, metrics.UploadConcurrency, metrics.BufferedBytes,
		metrics.RequestsTotal, "go_goroutines", "process_resident_memory_bytes"} {
		if before[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if got := sum(before, metrics.UploadConcurrency, nil); got != float64(e.cfg.Write.UploadConcurrency) {
		t.Errorf("%s = %v, want %d", metrics.UploadConcurrency, got, e.cfg.Write.UploadConcurrency)
	}

	var bs []partBatch
	for b := range 40 {
		r, _ := genBatch("m", int32(b), 2000, 64) // ~7 MiB: two parts
		bs = append(bs, partBatch{b % 3, r})
	}
	res, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: "q-metrics", Worker: "m", Partitions: 3}, slices.Values(bs))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := doGet(ctx, e.fc, map[string]any{"query": "q-metrics", "stage": 0, "partition": 1}); err != nil {
		t.Fatal(err)
	}
	after := scrape(t, e.httpURL)

	delta := func(name string, match map[string]string) float64 {
		return sum(after, name, match) - sum(before, name, match)
	}
	if d := delta(metrics.UploadBytesTotal, nil); d != float64(res.BytesStored) {
		t.Errorf("%s moved by %v, want the %d bytes stored", metrics.UploadBytesTotal, d, res.BytesStored)
	}
	if d := delta(metrics.RequestsTotal, nil); d < 4 {
		t.Errorf("%s moved by %v, want at least 4 (create, 2 parts, complete, manifest)", metrics.RequestsTotal, d)
	}
	if d := delta(metrics.RequestsTotal, map[string]string{"op": "UploadPart", "code": "200"}); d != float64(res.Parts) {
		t.Errorf(`%s{op="UploadPart",code="200"} moved by %v, want %d parts`, metrics.RequestsTotal, d, res.Parts)
	}
	if d := delta(metrics.UploadPartSeconds, nil); d != float64(res.Parts) {
		t.Errorf("%s observed %v parts, want %d", metrics.UploadPartSeconds, d, res.Parts)
	}
	if d := delta(metrics.ReadBytesTotal, nil); d <= 0 {
		t.Errorf("%s did not move after a DoGet", metrics.ReadBytesTotal)
	}
	if d := delta(metrics.SidecarCallsTotal, map[string]string{"method": "DoPut", "code": "OK"}); d != 1 {
		t.Errorf(`%s{method="DoPut",code="OK"} moved by %v, want 1`, metrics.SidecarCallsTotal, d)
	}
	if d := delta(metrics.SidecarRowsTotal, map[string]string{"method": "DoPut"}); d != float64(res.Rows) {
		t.Errorf("%s moved by %v, want %d", metrics.SidecarRowsTotal, d, res.Rows)
	}
	if got := sum(after, metrics.BufferedBytes, nil) + sum(after, metrics.UploadQueueChunks, nil); got != 0 {
		t.Errorf("buffered bytes and queued chunks after the commit: %v, want 0", got)
	}
	t.Logf("DoPut: %d rows, %d bytes stored in %d parts; requests %v", res.Rows, res.BytesStored, res.Parts, e.counter.Requests())
}

func waitReady(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get(t, e.httpURL+"/readyz")
		if code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %q after 5 s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNotReady: /readyz is 503 while the bucket cannot be listed, and as
// soon as a shutdown starts.
func TestNotReady(t *testing.T) {
	ep := testenv.Embedded(t)
	bad := newEnv(t, ep, envOptions{bucket: "no-such-bucket"})
	time.Sleep(200 * time.Millisecond) // a few probes
	code, body := get(t, bad.httpURL+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `bucket "no-such-bucket" unreachable`) {
		t.Fatalf("/readyz with a missing bucket: %d %q", code, body)
	}
	if code, _ := get(t, bad.httpURL+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}

	good := newEnv(t, ep, envOptions{})
	waitReady(t, good)
	h := good.srv.HTTPHandler()
	done := make(chan error)
	go func() { done <- good.srv.Shutdown(context.Background()) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := good.srv.Ready(); !errors.Is(err, sidecar.ErrShutdown) {
		t.Fatalf("Ready after Shutdown: %v", err)
	}
	rec := &responseRecorder{header: http.Header{}}
	req, _ := http.NewRequest("GET", "/readyz", nil)
	h.ServeHTTP(rec, req)
	if rec.code != http.StatusServiceUnavailable || !strings.Contains(rec.body.String(), "shutting down") {
		t.Fatalf("/readyz after shutdown: %d %q", rec.code, rec.body.String())
	}
}

type responseRecorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *responseRecorder) Header() http.Header { return r.header }
func (r *responseRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}
func (r *responseRecorder) WriteHeader(code int) { r.code = code }

// gauge reads a gauge of the registry, summed over series with labels.
func gauge(t *testing.T, m *metrics.Metrics, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range mfs {
		byName[f.GetName()] = f
	}
	return sum(byName, name, match)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after 10 s waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gatedPut is a DoPut whose batches stop after the first n until gate is
// closed; its outcome arrives on done.
type gatedPut struct {
	gate chan struct{}
	done chan error
	res  *flightclient.PutResult
	sent atomic.Int64
}

func startGatedPut(ctx context.Context, e *env, query, worker string, n, total int) *gatedPut {
	g := &gatedPut{gate: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		res, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: query, Worker: flightclient.WorkerID(worker), Partitions: 2}, func(yield func(partBatch) bool) {
			for b := range total {
				if b == n {
					<-g.gate
				}
				r, _ := genBatch(worker, int32(b), 2000, 64)
				g.sent.Add(1)
				if !yield(partBatch{(b + 1) % 2, r}) {
					return
				}
			}
		})
		g.res = res
		g.done <- err
	}()
	return g
}

// TestShutdownDrains: a stream in flight when Shutdown starts finishes
// within the grace and commits; new calls are refused meanwhile; Shutdown
// returns nil.
func TestShutdownDrains(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	ctx := context.Background()
	put := startGatedPut(ctx, e, "q-drain", "1", 5, 20)
	waitFor(t, "the stream to be in flight", func() bool {
		return put.sent.Load() == 5 && gauge(t, e.m, metrics.SidecarStreams, map[string]string{"method": "DoPut"}) == 1
	})
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- e.srv.Shutdown(sctx) }()
	waitFor(t, "the drain to start", func() bool { return e.srv.Ready() != nil })

	// New calls are refused, on a new connection and on the open one.
	_, err := e.dial().ListActions(ctx, &flight.Empty{})
	if err == nil {
		_, err = firstRecv(e.dial().ListActions(ctx, &flight.Empty{}))
	}
	wantCode(t, err, codes.Unavailable)
	_, err = firstRecv(e.fc.ListActions(ctx, &flight.Empty{}))
	wantCode(t, err, codes.Unavailable)

	close(put.gate)
	if err := <-put.done; err != nil || !put.res.Committed || put.res.Batches != 20 {
		t.Fatalf("stream in flight: %+v %v", put.res, err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := manifest.LoadWorker(ctx, e.raw, e.client.Layout(), "q-drain", 0, "1"); err != nil {
		t.Fatalf("the drained stream's manifest: %v", err)
	}
}

func firstRecv(s flight.FlightService_ListActionsClient, err error) (*flight.ActionType, error) {
	if err != nil {
		return nil, err
	}
	return s.Recv()
}

// TestShutdownCutsOff: of two streams in flight, the one that finishes
// within the grace commits; the one that does not is aborted when the
// grace's cleanup reserve begins, and by the time Shutdown returns, within
// the grace, nothing of it is left:
// no manifest, no data object, no open multipart upload.
func TestShutdownCutsOff(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{cutOff: true, cfg: uploading})
	ctx := context.Background()
	quick := startGatedPut(ctx, e, "q-cut", "1", 5, 20)
	// The stalled stream sends enough for its multipart upload to start.
	stalled := startGatedPut(ctx, e, "q-cut", "2", 60, 100)
	defer close(stalled.gate)
	waitFor(t, "both streams in flight and a part uploaded", func() bool {
		return quick.sent.Load() == 5 && stalled.sent.Load() == 60 && e.counter.Requests()["UploadPart"] >= 1 &&
			gauge(t, e.m, metrics.SidecarStreams, map[string]string{"method": "DoPut"}) == 2
	})
	const grace = 1500 * time.Millisecond
	sctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	shut := make(chan error, 1)
	start := time.Now()
	go func() { shut <- e.srv.Shutdown(sctx) }()
	close(quick.gate)
	if err := <-quick.done; err != nil || !quick.res.Committed {
		t.Fatalf("the stream that finished within the grace: %+v %v", quick.res, err)
	}
	err := <-shut
	took := time.Since(start)
	if !errors.Is(err, sidecar.ErrCutOff) || errors.Is(err, sidecar.ErrCleanup) ||
		!strings.Contains(err.Error(), "1 calls still running") || !strings.Contains(err.Error(), "1 of them DoPut streams") {
		t.Fatalf("Shutdown: %v, want 1 stream cut off", err)
	}
	// Streams get the grace less its cleanup reserve; the abort fits in
	// the reserve, so Shutdown ends within the grace.
	if reserve := sidecar.Reserve(grace, e.cfg.Write.CleanupTimeout.D()); took < grace-reserve || took > grace+500*time.Millisecond {
		t.Errorf("Shutdown returned after %v, want between the streams' %v and the %v grace", took, grace-reserve, grace)
	}
	// Checked at once, not polled: Shutdown waits for the abort.
	l := e.client.Layout()
	ups, lerr := e.raw.ListUploads(ctx, l.QueryPrefix("q-cut"))
	objs, _, oerr := e.raw.List(ctx, l.StagePrefix("q-cut", 0)+"worker-2/", "")
	if lerr != nil || oerr != nil || len(ups) != 0 || len(objs) != 0 {
		t.Fatalf("after Shutdown: open uploads %v (%v), worker 2 objects %v (%v)", ups, lerr, objs, oerr)
	}
	e.nothingLeft("q-cut", 0, "2")
	if _, err := manifest.LoadWorker(ctx, e.raw, l, "q-cut", 0, "1"); err != nil {
		t.Fatalf("the quick stream's manifest: %v", err)
	}
	select {
	case err := <-stalled.done:
		t.Fatalf("the stalled client finished before its gate opened: %v", err)
	default:
	}
	t.Logf("Shutdown after %v: %v", took.Round(time.Millisecond), err)
}

// slowParts delays every UploadPart: a store slower than the clients.
type slowParts struct {
	store.Store
	delay time.Duration
	parts atomic.Int64
}

func (s *slowParts) UploadPart(ctx context.Context, key, uploadID string, n int32, body store.Body) (store.Part, error) {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return store.Part{}, ctx.Err()
	}
	s.parts.Add(1)
	return s.Store.UploadPart(ctx, key, uploadID, n, body)
}

// TestMemoryBounded: 8 streams push 384 MiB into a store that takes
// 100 ms per part. The sidecar's memory must not grow with what is pushed:
// the pool never holds more than max_buffered_chunks chunks, and the Go
// heap in use (after GC, sampled every 100 ms) stays under
//
//	baseline                           heap in use before the streams start
//	+ max_buffered_chunks x chunk_size   the upload budget (20 MiB here)
//	+ 8 x per stream, the sidecar's side:
//	    coalesce_budget                  unencoded rows held per writer
//	    + (6 x encode_concurrency + 2)   frames in the encode pipeline: inputs
//	      x frame_target_bytes           queued and encoding, outputs encoding,
//	                                     done and being appended, the outputs
//	                                     at up to twice their size (buffer growth)
//	    + 1 MiB                          the gRPC stream window: bytes a client
//	                                     can push ahead of a blocked stream
//	    + 1 MiB + batch                  the message being received (gRPC rounds
//	                                     it up to its 1 MiB buffer class) and the
//	                                     decoded batch
//	  and the client's, in this same process:
//	    3 x batch + 1 MiB                the batch, its IPC encoding (up to twice
//	                                     its size) and gRPC's send buffer
//	+ 96 MiB                           runtime, gRPC/HTTP/SDK buffers and pools,
//	                                   fragmentation, and floating garbage: the
//	                                   process allocates some 300 MiB/s here
//	                                   (every byte is copied about five times
//	                                   between client and chunk), and what is
//	                                   allocated while a concurrent GC marks
//	                                   survives that GC
//
// 8 x 8.4 MiB + 20 MiB + 96 MiB is about 185 MiB above the baseline,
// under half of the 384 MiB pushed; without flow control the clients
// would push that in about a second. Observed peaks: 100 to 142 MiB,
// steady through the run (it does not grow with what is pushed). Against
// MinIO, because
// the embedded server keeps multipart parts in this process's memory.
// HEAPPROF=file writes a heap profile at each new peak and HEAPTRACE=1
// prints every tenth sample, for when it fails.
func TestMemoryBounded(t *testing.T) {
	const (
		streams   = 8
		perStream = 48 << 20
		rows      = 1000
		payload   = 200
		delay     = 100 * time.Millisecond
	)
	var slow *slowParts
	e := newEnv(t, testenv.MinIO(t), envOptions{
		cfg: func(c *durashuffle.Config) {
			c.Write.ChunkSize = 5 * durashuffle.MiB
			c.Write.UploadConcurrency = 2
			c.Write.MaxBufferedChunks = 4
			c.Write.FrameTargetBytes = 256 * durashuffle.KiB
			c.Write.CoalesceBudget = 1 * durashuffle.MiB
			c.Write.EncodeConcurrency = 2
			c.Write.Compression = "none"
			// Spill off: runs go to the pool's chunk buffers as they
			// flush, which is what the bound holds (a spilled writer's
			// object is uploaded from its file and takes none).
			c.Write.Spill = "off"
		},
		wrap: func(st store.Store) store.Store {
			slow = &slowParts{Store: st, delay: delay}
			return slow
		},
	})
	ctx := context.Background()
	probe, _ := genBatch("probe", 0, rows, payload)
	batchBytes := int64(0)
	for _, c := range probe.Columns() {
		for _, b := range c.Data().Buffers() {
			if b != nil {
				batchBytes += int64(b.Len())
			}
		}
	}
	probe.Release()
	nBatches := int(perStream / batchBytes)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapInuse
	cfg := e.cfg
	var (
		f       = int64(cfg.Write.FrameTargetBytes)
		server  = int64(cfg.Write.CoalesceBudget) + int64(6*cfg.Write.EncodeConcurrency+2)*f + 1<<20 + 1<<20 + batchBytes
		client  = 3*batchBytes + 1<<20
		uploads = int64(cfg.Write.MaxBufferedChunks) * int64(cfg.Write.ChunkSize)
		slack   = int64(96 << 20)
		bound   = baseline + uint64(uploads+streams*(server+client)+slack)
	)

	var (
		peak    atomic.Uint64
		samples atomic.Int64
		stop    = make(chan struct{})
		sampled = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if samples.Add(1)%10 == 0 && os.Getenv("HEAPTRACE") != "" {
				fmt.Fprintf(os.Stderr, "heap %d MiB live %d MiB\n", ms.HeapInuse>>20, ms.HeapAlloc>>20)
			}
			if old := peak.Load(); ms.HeapInuse > old {
				peak.Store(ms.HeapInuse)
				if f := os.Getenv("HEAPPROF"); f != "" {
					runtime.GC()
					if fh, err := os.Create(f); err == nil {
						pprof.Lookup("heap").WriteTo(fh, 0)
						fh.Close()
					}
				}
			}
		}
	}()

	start := time.Now()
	var (
		wg      sync.WaitGroup
		pushed  atomic.Int64
		results [streams]*flightclient.PutResult
		errs    [streams]error
	)
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := fmt.Sprint(s)
			cmd := flightclient.PutCommand{Query: "q-mem", Worker: flightclient.WorkerID(w), Partitions: 16}
			results[s], errs[s] = putWorker(ctx, e.sc, cmd, func(yield func(partBatch) bool) {
				for b := range nBatches {
					r, _ := genBatch(w, int32(b), rows, payload)
					pushed.Add(batchBytes)
					if !yield(partBatch{(b + 1) % 16, r}) {
						return
					}
				}
			})
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	<-sampled

	var stored int64
	for s := range streams {
		if errs[s] != nil {
			t.Fatalf("stream %d: %v", s, errs[s])
		}
		stored += results[s].BytesStored
	}
	stats := e.client.Stats()
	t.Logf("%d streams pushed %d MiB (%d MiB stored, %d parts) in %v: %.1f MiB/s; pool peak %d of %d chunks",
		streams, pushed.Load()>>20, stored>>20, slow.parts.Load(), took.Round(time.Millisecond),
		float64(stored)/(1<<20)/took.Seconds(), stats.PeakBuffered, cfg.Write.MaxBufferedChunks)
	t.Logf("heap in use after GC: baseline %d MiB, peak %d MiB over %d samples; bound %d MiB = baseline + uploads %d MiB + %d streams x (sidecar %.1f + client %.1f MiB) + slack %d MiB",
		baseline>>20, peak.Load()>>20, samples.Load(), bound>>20, uploads>>20, streams, float64(server)/(1<<20), float64(client)/(1<<20), slack>>20)
	if stats.PeakBuffered > int64(cfg.Write.MaxBufferedChunks) {
		t.Errorf("pool held %d chunks at once, max_buffered_chunks is %d", stats.PeakBuffered, cfg.Write.MaxBufferedChunks)
	}
	if stats.PeakBuffered < int64(cfg.Write.MaxBufferedChunks) {
		t.Errorf("pool held at most %d of %d chunks: the store was not the bottleneck, the test proves nothing", stats.PeakBuffered, cfg.Write.MaxBufferedChunks)
	}
	// The slow store must have paced the clients: parts / concurrency x delay.
	if min := time.Duration(slow.parts.Load()/int64(cfg.Write.UploadConcurrency)) * delay; took < min*8/10 {
		t.Errorf("pushing took %v, less than the %v the slow store needs: the clients were not paced", took, min)
	}
	if samples.Load() < 10 {
		t.Errorf("only %d heap samples", samples.Load())
	}
	if peak.Load() > bound {
		t.Errorf("heap in use peaked at %d MiB, above the bound of %d MiB", peak.Load()>>20, bound>>20)
	}
}

// TestShutdownSilentConnection: a TCP connection to the Flight port
// that sends nothing (a port scan, a load balancer's TCP check) does not
// hold a shutdown past its grace when no call runs.
func TestShutdownSilentConnection(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // accepted
	const grace = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- e.srv.Shutdown(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown with no call in flight: %v", err)
		}
	case <-time.After(grace + 3*time.Second):
		conn.Close()
		<-done
		t.Fatalf("a shutdown with a %v grace had not returned after %v, held by a silent connection", grace, time.Since(start))
	}
}
