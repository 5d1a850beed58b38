package sidecar_test

// Hostile clients: a handler that panics or hangs, clients that open
// streams and stall, descriptors and action bodies with absurd counts.
// Each test asserts the code and message the client gets, that nothing
// was committed and no multipart upload is left open, and that the
// sidecar serves the next call.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/sidecar"
	"github.com/durashuffle/durashuffle/store"
)

// forEveryBackend runs fn on the embedded server, MinIO and versitygw.
func forEveryBackend(t *testing.T, fn func(t *testing.T, ep testenv.Endpoint)) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Start(t)) })
	}
}

// putRows DoPuts n batches of worker w (to partitions b%parts), commits,
// and returns the rows written to each partition. It gives up after two
// minutes: a sidecar whose slots stalled clients hold would keep it
// waiting for ever.
func putRows(t *testing.T, e *env, query string, w string, n, parts int) [][]row {
	t.Helper()
	want := make([][]row, parts)
	var bs []putBatch
	for b := range n {
		rec, rows := genBatch(w, int32(b), 2000, 64)
		bs = append(bs, putBatch{rec, partMD(b % parts)})
		want[b%parts] = append(want[b%parts], rows...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := doPut(ctx, e.fc, putCmd(query, 0, w, "", parts), testSchema, batches(bs))
	if err != nil || !res.Committed {
		t.Fatalf("DoPut of worker %s: %+v, %v", w, res, err)
	}
	return want
}

// readsBack checks that DoGet of every partition returns want[p].
func readsBack(t *testing.T, e *env, query string, want [][]row) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for p := range want {
		_, got, err := doGet(ctx, e.fc, map[string]any{"query": query, "stage": 0, "partition": p})
		if err != nil {
			t.Fatalf("DoGet %s partition %d: %v", query, p, err)
		}
		if !slices.Equal(got, want[p]) {
			t.Fatalf("DoGet %s partition %d: %d rows, want %d: %s", query, p, len(got), len(want[p]), firstDiff(got, want[p]))
		}
	}
}

// TestHostilePanic: a panic inside DoPut, after the stream's multipart
// upload started, fails that stream alone with Internal; the writer is
// aborted (no manifest, no object, no open upload); the panic is logged
// at ERROR with its stack and counted in durashuffle_sidecar_panics_total
// on /metrics; and the next DoPut commits and reads back. The same for a
// panic in DoGet after its first batch went out (the client gets that
// batch, then Internal; the next DoGet reads the partition whole) and in
// DoAction. After each panicking call no stream holds a slot
// (durashuffle_sidecar_streams is 0).
func TestHostilePanic(t *testing.T) {
	forEveryBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{cfg: uploading})
		ctx := context.Background()
		var (
			armed atomic.Bool
			put   atomic.Int64 // DoPut batches while armed
			got   atomic.Int64 // DoGet batches while armed
		)
		restore := sidecar.SetTestHook(func(point string) {
			switch {
			case !armed.Load():
			case point == "DoPut.batch" && put.Add(1) == 50:
				armed.Store(false)
				panic("hostile test: a bug in DoPut after 49 batches")
			case point == "DoGet.batch" && got.Add(1) == 2:
				armed.Store(false)
				panic("hostile test: a bug in DoGet after 1 batch")
			case point == "DoAction":
				armed.Store(false)
				panic("hostile test: a bug in DoAction")
			}
		})
		t.Cleanup(restore)
		panics := func(method string) float64 {
			return sum(scrape(t, e.httpURL), metrics.SidecarPanicsTotal, map[string]string{"method": method})
		}
		noSlotHeld := func(after string) {
			t.Helper()
			if n := sum(scrape(t, e.httpURL), metrics.SidecarStreams, nil); n != 0 {
				t.Errorf("after %s: %s = %v, want 0", after, metrics.SidecarStreams, n)
			}
		}
		for _, m := range []string{"DoPut", "DoGet", "DoAction"} {
			if n := panics(m); n != 0 {
				t.Fatalf("%s{method=%s} = %v before any panic", metrics.SidecarPanicsTotal, m, n)
			}
		}

		armed.Store(true)
		var bs []putBatch
		for b := range 60 { // ~11 MiB: the 5 MiB parts start uploading before batch 50
			rec, _ := genBatch("p", int32(b), 2000, 64)
			bs = append(bs, putBatch{rec, partMD(b % 2)})
		}
		_, err := doPut(ctx, e.fc, putCmd("q-panic", 0, "p", "", 2), testSchema, batches(bs))
		wantCode(t, err, codes.Internal, "internal error in DoPut", "a bug in DoPut", "its uncommitted output was aborted")
		if n := e.counter.Requests()["CreateMultipartUpload"]; n < 1 {
			t.Fatalf("no multipart upload was started before the panic (requests %v): the abort had nothing to do", e.counter.Requests())
		}
		noSlotHeld("the DoPut panic")
		e.nothingLeft("q-panic", 0, "p")
		if n := panics("DoPut"); n != 1 {
			t.Errorf("%s{method=DoPut} = %v after one panic, want 1", metrics.SidecarPanicsTotal, n)
		}
		logs := e.logs.String()
		if !strings.Contains(logs, "level=ERROR msg=\"panic in handler") || !strings.Contains(logs, "a bug in DoPut") ||
			!strings.Contains(logs, "hostile_test.go") {
			t.Errorf("the panic is not logged at ERROR with its stack:\n%s", logs)
		}

		// The process serves on: a DoPut commits and reads back.
		want := putRows(t, e, "q-after", "0", 10, 2)
		if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": "q-after", "stage": 0, "workers": 1}, nil); err != nil {
			t.Fatal(err)
		}
		readsBack(t, e, "q-after", want)

		armed.Store(true)
		_, rows, err := doGet(ctx, e.fc, map[string]any{"query": "q-after", "stage": 0, "partition": 0})
		wantCode(t, err, codes.Internal, "internal error in DoGet", "a bug in DoGet", "the call failed")
		if len(rows) == 0 || len(rows) >= len(want[0]) || !slices.Equal(rows, want[0][:len(rows)]) {
			t.Errorf("the DoGet that panicked after its first batch delivered %d rows, want the first of the partition's %d", len(rows), len(want[0]))
		}
		noSlotHeld("the DoGet panic")
		if n := panics("DoGet"); n != 1 {
			t.Errorf("%s{method=DoGet} = %v after one panic, want 1", metrics.SidecarPanicsTotal, n)
		}
		if logs := e.logs.String(); !strings.Contains(logs, "a bug in DoGet") {
			t.Errorf("the DoGet panic is not logged:\n%s", logs)
		}
		readsBack(t, e, "q-after", want)

		armed.Store(true)
		err = doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": "q-after", "stage": 0, "workers": 1}, nil)
		wantCode(t, err, codes.Internal, "internal error in DoAction", "a bug in DoAction")
		noSlotHeld("the DoAction panic")
		if n := panics("DoAction"); n != 1 {
			t.Errorf("%s{method=DoAction} = %v after one panic, want 1", metrics.SidecarPanicsTotal, n)
		}
		var res flightclient.SealResult
		if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": "q-after", "stage": 0, "workers": 1}, &res); err != nil || !res.Sealed {
			t.Fatalf("seal after the DoAction panic: %+v, %v", res, err)
		}
		readsBack(t, e, "q-after", want)
		for m, n := range map[string]float64{"DoPut": 1, "DoGet": 1, "DoAction": 1} {
			if got := panics(m); got != n {
				t.Errorf("%s{method=%s} = %v at the end, want %v", metrics.SidecarPanicsTotal, m, got, n)
			}
		}
	})
}

// TestHostileStuckHandler: a DoPut handler that blocks for ever, ignoring
// its context, cannot keep Shutdown from returning: after the grace and
// the bounded cleanup wait it returns an error wrapping ErrStuck (and
// ErrCutOff), and a stream that was merely in flight was aborted.
func TestHostileStuckHandler(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{cutOff: true, cfg: func(c *durashuffle.Config) {
		c.Write.CleanupTimeout = durashuffle.Duration(time.Second)
	}})
	ctx := context.Background()
	stuck := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(stuck) }) }
	t.Cleanup(free) // before the env's cleanup, which waits for the handler
	entered := make(chan struct{})
	var first atomic.Bool
	restore := sidecar.SetTestHook(func(point string) {
		if point == "DoPut.batch" && first.CompareAndSwap(false, true) {
			close(entered)
			<-stuck // a handler deaf to cancellation
		}
	})
	t.Cleanup(restore)
	done := make(chan error, 1)
	go func() {
		rec, _ := genBatch("s", 0, 100, 8)
		_, err := doPut(ctx, e.fc, putCmd("q-stuck", 0, "s", "", 1), testSchema, batches([]putBatch{{rec, partMD(0)}}))
		done <- err
	}()
	<-entered
	const grace = 1500 * time.Millisecond
	reserve := sidecar.Reserve(grace, time.Second)
	sctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- e.srv.Shutdown(sctx) }()
	select {
	case err := <-shut:
		took := time.Since(start)
		if !errors.Is(err, sidecar.ErrStuck) || !errors.Is(err, sidecar.ErrCutOff) || !strings.Contains(err.Error(), "1 calls still running") {
			t.Fatalf("Shutdown: %v, want ErrStuck naming 1 call", err)
		}
		if took < grace-reserve {
			t.Errorf("Shutdown returned after %v, before the streams' part of the grace (%v of %v) ended", took, grace-reserve, grace)
		}
		t.Logf("Shutdown returned after %v of a %v grace (cleanup reserve %v): %v", took.Round(time.Millisecond), grace, reserve, err)
	case <-time.After(grace + 30*time.Second):
		t.Fatalf("Shutdown still waiting 30 s after the grace: a stuck handler holds it")
	}
	if !strings.Contains(e.logs.String(), "calls still running at the end of the grace") {
		t.Errorf("the stuck calls are not logged:\n%s", e.logs.String())
	}
	free()
	if err := <-done; err == nil {
		t.Fatal("the stuck DoPut committed")
	}
	e.nothingLeft("q-stuck", 0, "s")
}

// stalledPut is a DoPut stream that sent what it was told to and then
// nothing; err is what the server ended it with.
type stalledPut struct {
	worker string
	err    chan error
}

// stallPut opens a DoPut that sends: nothing ("nothing"), its descriptor
// alone ("descriptor"), or its descriptor and schema ("schema"); then it
// waits for the server's answer, for at most a minute of its own.
func stallPut(t *testing.T, e *env, query, worker, sends string) *stalledPut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	stream, err := e.fc.DoPut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(putCmd(query, 0, worker, "", 2))
	desc := &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: b}
	switch sends {
	case "descriptor":
		err = stream.Send(&flight.FlightData{FlightDescriptor: desc})
	case "schema":
		w := flight.NewRecordWriter(stream, ipc.WithSchema(testSchema))
		w.SetFlightDescriptor(desc)
		err = w.Close() // the schema, with the descriptor; no CloseSend
	}
	if err != nil {
		t.Fatal(err)
	}
	p := &stalledPut{worker: worker, err: make(chan error, 1)}
	go func() {
		_, err := stream.Recv()
		p.err <- err
	}()
	return p
}

// TestHostileStalledStreams: with max_streams 2, two DoPuts that send
// their descriptor and schema and then nothing take both slots, and four
// more send nothing or a descriptor alone. A normal DoPut still commits
// and a DoGet reads it back, long before the stalled clients' own
// deadlines: the stalled streams fail with DeadlineExceeded naming
// stream_first_message_timeout or stream_idle_timeout, commit nothing and
// leave no upload. A DoGet whose client does not read fails the same way
// (stream_idle_timeout) and frees its slot, while another DoGet proceeds.
func TestHostileStalledStreams(t *testing.T) {
	const (
		first = 1 * time.Second
		idle  = 2 * time.Second
	)
	forEveryBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{cfg: func(c *durashuffle.Config) {
			c.Sidecar.MaxStreams = 2
			c.Sidecar.StreamFirstMessageTimeout = durashuffle.Duration(first)
			c.Sidecar.StreamIdleTimeout = durashuffle.Duration(idle)
		}})
		ctx := context.Background()
		var stalled []*stalledPut
		for i := range 2 {
			stalled = append(stalled, stallPut(t, e, "q-stall", fmt.Sprintf("schema-%d", i), "schema"))
		}
		waitFor(t, "the two stalled DoPuts holding both slots", func() bool {
			return gauge(t, e.m, metrics.SidecarStreams, map[string]string{"method": "DoPut"}) == 2
		})
		for i := range 2 {
			stalled = append(stalled, stallPut(t, e, "q-stall", fmt.Sprintf("nothing-%d", i), "nothing"))
			stalled = append(stalled, stallPut(t, e, "q-stall", fmt.Sprintf("descriptor-%d", i), "descriptor"))
		}

		start := time.Now()
		want := putRows(t, e, "q-ok", "0", 40, 2) // ~7 MiB, multipart
		if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": "q-ok", "stage": 0, "workers": 1}, nil); err != nil {
			t.Fatal(err)
		}
		readsBack(t, e, "q-ok", want)
		t.Logf("normal DoPut, seal and DoGet done %v after the stalled streams opened", time.Since(start).Round(time.Millisecond))

		for _, p := range stalled {
			select {
			case err := <-p.err:
				key := "stream_first_message_timeout"
				if strings.HasPrefix(p.worker, "schema") {
					key = "stream_idle_timeout"
				}
				wantCode(t, err, codes.DeadlineExceeded, key, "nothing was committed")
			case <-time.After(30 * time.Second):
				t.Fatalf("stalled DoPut %s not ended by the server 30 s after the normal calls finished", p.worker)
			}
			e.nothingLeft("q-stall", 0, p.worker)
		}

		// A DoGet whose client reads nothing: the sidecar's sends block
		// on flow control once the client's fixed 64 KiB windows fill
		// (the stage is ~7 MiB).
		lc, err := flight.NewClientWithMiddleware(e.addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
		gctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		tkt, _ := json.Marshal(map[string]any{"query": "q-ok", "stage": 0, "partitions": []int{0, 1}})
		lazy, err := lc.DoGet(gctx, &flight.Ticket{Ticket: tkt})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the lazy DoGet to hold a slot", func() bool {
			return gauge(t, e.m, metrics.SidecarStreams, map[string]string{"method": "DoGet"}) == 1
		})
		readsBack(t, e, "q-ok", want) // the other slot serves meanwhile
		waitFor(t, "the lazy DoGet to be ended", func() bool {
			return gauge(t, e.m, metrics.SidecarStreams, map[string]string{"method": "DoGet"}) == 0
		})
		var got error
		for got == nil {
			_, got = lazy.Recv()
		}
		wantCode(t, got, codes.DeadlineExceeded, "DoGet", "read nothing", "stream_idle_timeout")
		readsBack(t, e, "q-ok", want)
		if n := gauge(t, e.m, metrics.SidecarStreams, nil); n != 0 {
			t.Fatalf("%v streams still hold slots", n)
		}
	})
}

// TestHostilePartitionsLimit: a DoPut descriptor with partitions one over
// MaxPartitions is InvalidArgument naming the limit, not Internal, and is
// not logged as a server error; nothing is committed; the next DoPut
// commits. The library's NewWriter fails the same way, with an error
// that wraps ErrPartitionCount.
func TestHostilePartitionsLimit(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	ctx := context.Background()
	over := durashuffle.MaxPartitions + 1
	rec, _ := genBatch("x", 0, 10, 8)
	_, err := doPut(ctx, e.fc, putCmd("q-parts", 0, "x", "", over), testSchema, batches([]putBatch{{rec, partMD(0)}}))
	wantCode(t, err, codes.InvalidArgument, fmt.Sprintf("partitions %d", over), fmt.Sprint(durashuffle.MaxPartitions), "MaxPartitions")
	e.nothingLeft("q-parts", 0, "x")
	if n := gauge(t, e.m, metrics.SidecarAbortsTotal, nil); n != 1 {
		t.Errorf("a DoPut refused for its descriptor: %s = %v, want 1", metrics.SidecarAbortsTotal, n)
	}
	if logs := e.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("a client's bad descriptor is logged as a server error:\n%s", logs)
	}
	if _, err := e.client.NewWriter(ctx, durashuffle.WriterOptions{Query: "q-parts", Worker: "x", Partitions: over, Schema: testSchema}); !errors.Is(err, durashuffle.ErrPartitionCount) ||
		!strings.Contains(err.Error(), fmt.Sprint(durashuffle.MaxPartitions)) {
		t.Fatalf("NewWriter with %d partitions: %v, want ErrPartitionCount naming the limit", over, err)
	}
	// Within MaxPartitions, but more partitions than coalesce_budget
	// holds the state of: the client's to fix, not the server's.
	rec, _ = genBatch("z", 0, 10, 8)
	_, err = doPut(ctx, e.fc, putCmd("q-parts", 0, "z", "", 500_000), testSchema, batches([]putBatch{{rec, partMD(0)}}))
	wantCode(t, err, codes.InvalidArgument, "500000 partitions", "coalesce_budget")
	e.nothingLeft("q-parts", 0, "z")
	if logs := e.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("partitions the budget cannot hold are logged as a server error:\n%s", logs)
	}
	want := putRows(t, e, "q-parts", "y", 3, 2)
	readsBack(t, e, "q-parts", want)
}

// countGets counts the GetRange calls that reach the store, including
// those whose context is already done (which send nothing).
type countGets struct {
	store.Store
	n atomic.Int64
}

func (c *countGets) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	c.n.Add(1)
	return c.Store.GetRange(ctx, key, off, length)
}

// TestHostileSealWorkers: seal-stage with workers 100,000,000 is
// InvalidArgument naming MaxSealWorkers and makes no request; a seal of
// 300 workers of which 2 committed fails FailedPrecondition with a
// bounded message, after at most 300 GETs; a seal of MaxSealWorkers whose
// caller's deadline is 1 s ends on the server (DeadlineExceeded or
// Canceled, whichever gRPC sees first) soon after, having started no
// read beyond those in flight when its context ended. None of the three
// writes a stage manifest or index (the stage prefix is listed after
// each); the seal of the 2 workers then writes them, and the stage reads
// back.
func TestHostileSealWorkers(t *testing.T) {
	forEveryBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		reads := &countGets{}
		e := newEnv(t, ep, envOptions{wrap: func(st store.Store) store.Store { reads.Store = st; return reads }})
		ctx := context.Background()
		const query = "q-seal"
		want := putRows(t, e, query, "0", 4, 2)
		for p, rows := range putRows(t, e, query, "1", 4, 2) {
			want[p] = append(want[p], rows...)
		}
		gets := func() int64 { return e.counter.Requests()["GetObject"] }
		unsealed := func(after string) {
			t.Helper()
			keys, err := e.stageManifests(ctx, query, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) > 0 {
				t.Fatalf("after %s: the stage holds %v, want no stage manifest or index", after, keys)
			}
		}
		seal := func(ctx context.Context, workers int) error {
			return doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": query, "stage": 0, "workers": workers}, nil)
		}

		before := gets()
		err := seal(ctx, 100_000_000)
		wantCode(t, err, codes.InvalidArgument, "100000000", fmt.Sprint(manifest.MaxSealWorkers), "MaxSealWorkers")
		if n := gets() - before; n != 0 {
			t.Errorf("the refused seal made %d GETs", n)
		}
		unsealed("the seal of 100000000 workers")

		const n = 300
		before = gets()
		err = seal(ctx, n)
		wantCode(t, err, codes.FailedPrecondition, fmt.Sprintf("%d of %d workers have no manifest: 2, 3, 4", n-2, n), fmt.Sprintf("and %d more", n-2-32))
		if got := gets() - before; got > n || got < 1 {
			t.Errorf("a seal of %d workers made %d GETs, want 1 to %d", n, got, n)
		}
		unsealed("the seal of 300 workers")

		calls := func() float64 { // the server's end of a call whose caller's deadline passed
			return gauge(t, e.m, metrics.SidecarCallsTotal, map[string]string{"method": "DoAction", "code": "DeadlineExceeded"}) +
				gauge(t, e.m, metrics.SidecarCallsTotal, map[string]string{"method": "DoAction", "code": "Canceled"})
		}
		was := calls()
		before, calledBefore := gets(), reads.n.Load()
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err = seal(sctx, manifest.MaxSealWorkers)
		wantCode(t, err, codes.DeadlineExceeded)
		waitFor(t, "the server to end the seal its caller gave up on", func() bool { return calls() > was })
		sent, called := gets()-before, reads.n.Load()-calledBefore
		if wasted := called - sent; wasted > 32 {
			t.Errorf("the seal sent %d GETs but called GetRange %d times: it went on starting reads after its caller's deadline", sent, called)
		}
		at := gets()
		time.Sleep(time.Second)
		if more := gets() - at; more > 0 {
			t.Errorf("%d GETs after the seal ended on the server", more)
		}
		t.Logf("the seal of %d workers sent %d GETs (%d reads started) before its caller's deadline ended it", manifest.MaxSealWorkers, sent, called)
		unsealed("the seal whose caller gave up")

		var res flightclient.SealResult
		if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": query, "stage": 0, "workers": 2}, &res); err != nil || !res.Sealed || res.Workers != 2 {
			t.Fatalf("seal of the 2 committed workers: %+v, %v", res, err)
		}
		if keys, err := e.stageManifests(ctx, query, 0); err != nil || !slices.Contains(keys, e.client.Layout().StageManifestKey(query, 0)) {
			t.Fatalf("after the seal of the 2 workers: the stage holds %v (%v), want its manifest", keys, err)
		}
		readsBack(t, e, query, want)
	})
}

// TestHostileCombinePlan: combine actions that only plan, on a stage
// that does not exist, each value within its own limit, whose plans
// would have millions of tasks or take minutes to predict: each is
// InvalidArgument at once, naming the bound, and the sidecar serves on.
func TestHostileCombinePlan(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		req  flightclient.CombineRequest
		want string
	}{
		{flightclient.CombineRequest{ExpectWorkers: 100_000, ExpectPartitions: 1 << 20, ExpectBytes: 1 << 62}, "more than the 1048576 a plan may have"},
		{flightclient.CombineRequest{ExpectWorkers: 2000, ExpectPartitions: 2000, ExpectBytes: 1 << 40, Groups: 2000, Buckets: 2000}, "4000000 tasks, more than the 1048576"},
		{flightclient.CombineRequest{ExpectWorkers: 100_000, ExpectPartitions: 100_000, ExpectBytes: 1 << 40}, "steps to predict, more than 536870912"},
	} {
		req := c.req
		req.Query, req.Plan = "nosuch", true
		start := time.Now()
		_, err := e.sc.Combine(ctx, req)
		wantCode(t, err, codes.InvalidArgument, c.want)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("a refused plan took %v", took)
		}
	}
	if _, err := e.sc.Combine(ctx, flightclient.CombineRequest{Query: "nosuch", Plan: true, ExpectWorkers: 64, ExpectPartitions: 64, ExpectBytes: 1 << 30}); err != nil {
		t.Fatalf("a plan of a stage of ordinary size: %v", err)
	}
}

// TestHostileTicketSize: a ticket larger than a partition list of
// MaxPartitions, or naming more partitions than that, is InvalidArgument
// before it is decoded whole or takes a slot.
func TestHostileTicketSize(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	get := func(b []byte) error {
		stream, err := e.fc.DoGet(ctx, &flight.Ticket{Ticket: b})
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	big := []byte(`{"query":"q","stage":0,"partitions":[` + strings.Repeat("1,", 5*manifest.MaxPartitions) + `1]}`)
	wantCode(t, get(big), codes.InvalidArgument, "ticket of", "at most")
	many := []byte(`{"query":"q","stage":0,"partitions":[` + strings.Repeat("0,", manifest.MaxPartitions) + `0]}`)
	wantCode(t, get(many), codes.InvalidArgument, fmt.Sprintf("names %d partitions", manifest.MaxPartitions+1), "MaxPartitions")
}
