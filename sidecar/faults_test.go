package sidecar_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// sidecarFaults are the matrix's columns, as for the command line: each
// operation's first request meets the fault.
var sidecarFaults = []faultproxy.Fault{faultproxy.FaultReset, faultproxy.FaultTruncate, faultproxy.FaultInternal, faultproxy.FaultSlowDown}

// matrixRate is how often the column's fault meets a request beyond the
// first of each operation: the seed decides which.
const matrixRate = 0.05

// sidecarCall is one call of the sidecar's lifecycle and a summary of its
// answer that must not depend on the network.
type sidecarCall struct {
	name string
	run  func(ctx context.Context, t *testing.T, e *env) string
}

// sidecarCalls are DoPut (two workers), the seal action, GetFlightInfo,
// ListFlights, DoGet of every partition, combine, DoGet of the combined
// stage, held, release, gc and delete-query. (fetch never reads S3.)
func sidecarCalls() []sidecarCall {
	const q = "sfq"
	want := make([][]row, 3)
	put := func(w string) func(ctx context.Context, t *testing.T, e *env) string {
		return func(ctx context.Context, t *testing.T, e *env) string {
			for p, rows := range putRows(t, e, q, w, 6, 3) {
				want[p] = append(want[p], rows...)
			}
			return "committed"
		}
	}
	get := func(ctx context.Context, t *testing.T, e *env) string {
		readsBack(t, e, q, want)
		return fmt.Sprintf("%d partitions read back", len(want))
	}
	return []sidecarCall{
		{"DoPut 0", put("0")},
		{"DoPut 1", put("1")},
		{"seal", func(ctx context.Context, t *testing.T, e *env) string {
			r, err := e.sc.Seal(ctx, q, 0, 2)
			if err != nil {
				t.Fatalf("seal: %v", err)
			}
			return fmt.Sprintf("sealed %v: %d workers, %d partitions, %d rows, %d objects", r.Sealed, r.Workers, r.Partitions, r.Rows, r.Objects)
		}},
		{"GetFlightInfo", func(ctx context.Context, t *testing.T, e *env) string {
			s, err := e.sc.Describe(ctx, q, 0)
			if err != nil {
				t.Fatalf("GetFlightInfo: %v", err)
			}
			return fmt.Sprintf("sealed %v: %d workers, %d partitions, %d rows", s.Sealed, s.Workers, len(s.Partitions), s.Rows)
		}},
		{"ListFlights", func(ctx context.Context, t *testing.T, e *env) string {
			ss, err := e.sc.List(ctx, q)
			if err != nil {
				t.Fatalf("ListFlights: %v", err)
			}
			return fmt.Sprintf("%d stages", len(ss))
		}},
		{"DoGet", get},
		{"combine", func(ctx context.Context, t *testing.T, e *env) string {
			r, err := e.sc.Combine(ctx, flightclient.CombineRequest{Query: q, Groups: 2, Buckets: 2})
			if err != nil {
				t.Fatalf("combine: %v", err)
			}
			return fmt.Sprintf("%d tasks, %d written, sealed %v, combined %v", r.Tasks, r.Wrote, r.Sealed, r.Combined)
		}},
		{"DoGet combined", get},
		{"held", func(ctx context.Context, t *testing.T, e *env) string {
			r, err := e.sc.Held(ctx, q, 0)
			if err != nil {
				t.Fatalf("held: %v", err)
			}
			return fmt.Sprintf("%d workers held", len(r.Workers))
		}},
		{"release", func(ctx context.Context, t *testing.T, e *env) string {
			r, err := e.sc.Release(ctx, q, 0)
			if err != nil {
				t.Fatalf("release: %v", err)
			}
			return fmt.Sprintf("%d workers released", r.Workers)
		}},
		{"gc", func(ctx context.Context, t *testing.T, e *env) string {
			r, err := e.sc.GC(ctx, time.Hour, time.Nanosecond)
			if err != nil {
				t.Fatalf("gc: %v", err)
			}
			return fmt.Sprintf("%d objects deleted, %d uploads aborted, %d stages deleted", r.Totals.ObjectsDeleted, r.Totals.UploadsAborted, r.Totals.StagesDeleted)
		}},
		{"delete-query", func(ctx context.Context, t *testing.T, e *env) string {
			r, err := e.sc.DeleteQuery(ctx, q)
			if err != nil {
				t.Fatalf("delete-query: %v", err)
			}
			return fmt.Sprintf("%d objects deleted, %d uploads aborted", r.DeletedObjects, r.AbortedUploads)
		}},
	}
}

// runSidecar makes every call of sidecarCalls on a sidecar whose store
// sits behind a fault proxy with spec (First starting over for each
// call), auditing that every request goes through the retry layer. It
// returns each call's summary and the faults injected and requests
// retried in all, and checks that the bucket is left empty, with no open
// multipart upload.
func runSidecar(t *testing.T, ep testenv.Endpoint, spec faultproxy.Spec) (outcomes []string, injected, retried int64) {
	t.Helper()
	p, err := faultproxy.StartTLS(ep.URL, spec, ep.ServerTLS(t), ep.Transport(t).TLSClientConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close fault proxy: %v", err)
		}
	})
	front := ep
	front.URL = p.URL()
	var audit *testenv.RetryAudit
	e := newEnv(t, front, envOptions{transport: func(rt http.RoundTripper) http.RoundTripper {
		audit = testenv.NewRetryAudit(rt)
		return audit
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range sidecarCalls() {
		audit.Reset()
		if err := p.SetSpec(spec); err != nil {
			t.Fatal(err)
		}
		faultsBefore, retriesBefore := p.Stats(), e.counter.Retries()
		outcomes = append(outcomes, c.name+": "+c.run(ctx, t, e))
		faults, retries := map[string]int64{}, map[string]int64{}
		for k, n := range p.Stats().Injected {
			if d := n - faultsBefore.Injected[k]; d > 0 {
				faults[k.Op] += d
			}
		}
		for k, n := range e.counter.Retries() {
			if d := n - retriesBefore[k]; d > 0 {
				retries[k.Op] += d
			}
		}
		t.Logf("%s %s: faults %s; retried %s", spec, c.name, testenv.FormatCounts(faults), testenv.FormatCounts(retries))
		// held and release answer from memory: no request to check.
		if c.name != "held" && c.name != "release" {
			audit.Check(t, c.name)
		}
	}
	injected = p.Stats().Total()
	for _, n := range e.counter.Retries() {
		retried += n
	}
	direct, _ := ep.NewStore(t)
	ups, err := direct.ListUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		t.Errorf("multipart upload left open: %s (%s)", u.Key, u.UploadID)
	}
	objs, _, err := direct.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		t.Errorf("left after delete-query: %s", o.Key)
	}
	return outcomes, injected, retried
}

// TestSidecarFaults is the sidecar's fault matrix: every call, on the
// embedded server and MinIO, through a proxy whose fault (reset, cut
// body, 500, SlowDown) meets the first request of every operation each
// call sends, and 5% of the others by the seed, must answer as on a clean network, every request going
// through the retry layer; the bucket ends empty.
func TestSidecarFaults(t *testing.T) {
	runs := testenv.SoakRuns(t, 1)
	for _, b := range testenv.Backends()[:2] {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			want, _, _ := runSidecar(t, b.Start(t), faultproxy.Spec{})
			for _, f := range sidecarFaults {
				for seed := 1; seed <= runs; seed++ {
					t.Run(fmt.Sprintf("%s/seed=%d", f, seed), func(t *testing.T) {
						got, injected, retried := runSidecar(t, b.Start(t), faultproxy.Only(f, matrixRate, uint64(seed)))
						for i := range want {
							if got[i] != want[i] {
								t.Errorf("under first=%s: %s\nclean: %s", f, got[i], want[i])
							}
						}
						if injected == 0 || retried == 0 {
							t.Errorf("first=%s: %d faults injected, %d requests retried: the matrix proved nothing", f, injected, retried)
						}
						t.Logf("first=%s: %d faults injected, %d requests retried", f, injected, retried)
					})
				}
			}
		})
	}
}
