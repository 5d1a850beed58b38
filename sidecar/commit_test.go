package sidecar_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// TestPutCommitMessage: only a commit message whose counts match what
// arrived commits. A wrong count is InvalidArgument naming both numbers,
// a stream without the message is Aborted, a malformed message or data
// after it is InvalidArgument; none of them leaves anything behind.
func TestPutCommitMessage(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	ctx := context.Background()
	three := func() []partBatch {
		var bs []partBatch
		for b := range int32(3) {
			r, _ := genBatch("c", b, 100+int(b), 8) // 100 + 101 + 102 = 303 rows
			bs = append(bs, partBatch{int(b) % 2, r})
		}
		return bs
	}
	raw := func(md string) func(int64, int64) []byte { return func(int64, int64) []byte { return []byte(md) } }
	cases := []struct {
		name   string
		commit func(batches, rows int64) []byte
		code   codes.Code
		frags  []string
	}{
		{name: "batch count too low", commit: func(b, r int64) []byte { return commitMD(b-1, r) },
			code: codes.InvalidArgument, frags: []string{"counts 2 batches and 303 rows", "received 3 batches and 303 rows", "nothing was committed"}},
		{name: "row count too high", commit: func(b, r int64) []byte { return commitMD(b, r+1) },
			code: codes.InvalidArgument, frags: []string{"counts 3 batches and 304 rows", "received 3 batches and 303 rows"}},
		{name: "no commit message", commit: nil,
			code: codes.Aborted, frags: []string{"stream ended without commit", "received 3 batches (303 rows)", `{"commit": {"batches": B, "rows": R}}`}},
		{name: "commit without rows", commit: raw(`{"commit": {"batches": 3}}`),
			code: codes.InvalidArgument, frags: []string{"with both counts"}},
		{name: "commit with an unknown key", commit: raw(`{"commit": {"batches": 3, "rows": 303, "bytes": 1}}`),
			code: codes.InvalidArgument, frags: []string{`unknown field "bytes"`}},
		{name: "negative count", commit: raw(`{"commit": {"batches": -1, "rows": 303}}`),
			code: codes.InvalidArgument, frags: []string{"must not be negative"}},
		// Metadata-only messages that are not a commit are ignored, so
		// the stream still lacks its commit.
		{name: "other metadata only", commit: raw(`{"progress": 3}`),
			code: codes.Aborted, frags: []string{"stream ended without commit"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := doPutCommit(ctx, e.fc, putCmd("q-commit", 0, "w", "", 2), testSchema, rawBatches(three()), c.commit)
			wantCode(t, err, c.code, c.frags...)
		})
	}

	t.Run("a batch after the commit message", func(t *testing.T) {
		err := rawPut(ctx, e.fc, putCmd("q-commit", 0, "w", "", 2), func(s flight.FlightService_DoPutClient, desc []byte) error {
			w := flight.NewRecordWriter(s, ipc.WithSchema(testSchema))
			w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: desc})
			r, _ := genBatch("c", 0, 10, 8)
			defer r.Release()
			if err := w.WriteWithAppMetadata(r, partMD(0)); err != nil {
				return err
			}
			if err := w.WriteMetadata(commitMD(1, 10)); err != nil {
				return err
			}
			return w.WriteWithAppMetadata(r, partMD(1))
		})
		wantCode(t, err, codes.InvalidArgument, "another IPC message followed the commit message (after 1 batches)")
	})
	e.nothingLeft("q-commit", 0, "w")
	if n := gauge(t, e.m, metrics.SidecarCommitsTotal, nil); n != 0 {
		t.Fatalf("%v commits counted, want 0", n)
	}

	// The same batches with the right counts, which the typed client
	// sends, commit.
	res, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: "q-commit", Worker: "w", Partitions: 2}, slices.Values(three()))
	if err != nil || !res.Committed || res.Batches != 3 || res.Rows != 303 {
		t.Fatalf("with the right counts: %+v %v", res, err)
	}
}

// TestHalfCloseThenCancel is what grpc-js's cancel() does: the client
// half-closes its side of the stream (END_STREAM) without a commit
// message, the sidecar sees the end of the stream, and only then the
// client cancels. The sidecar must not take that end for a commit: the
// output is aborted, no manifest, object or upload remains.
func TestHalfCloseThenCancel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{})
		const query, worker = "q-halfclose", "5"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := e.fc.DoPut(ctx)
		if err != nil {
			t.Fatal(err)
		}
		desc, _ := json.Marshal(putCmd(query, 0, worker, "a1", 4))
		w := flight.NewRecordWriter(stream, ipc.WithSchema(testSchema))
		w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: desc})
		var b int32
		// Enough that the output's first part is uploaded: a truncated
		// but well-formed output, which the old rule would have committed.
		for e.counter.Requests()["UploadPart"] == 0 && b < 400 {
			r, _ := genBatch(worker, b, 2000, 64)
			if err := w.WriteWithAppMetadata(r, partMD(int(b)%4)); err != nil {
				t.Fatal(err)
			}
			r.Release()
			b++
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		// The gap grpc-js leaves between END_STREAM and RST_STREAM, made
		// as wide as it takes: the sidecar has seen the end and decided.
		waitFor(t, "the sidecar to end the stream", func() bool {
			return strings.Contains(e.logs.String(), "put aborted") || gauge(t, e.m, metrics.SidecarCommitsTotal, nil) > 0
		})
		cancel()
		_, err = stream.Recv()
		if c := status.Code(err); c != codes.Aborted && c != codes.Canceled {
			t.Fatalf("after half-close and cancel: %v (code %v), want Aborted or Canceled", err, c)
		}
		if n := gauge(t, e.m, metrics.SidecarCommitsTotal, nil); n != 0 {
			t.Fatalf("the sidecar committed a stream that ended without its commit message (%v commits)", n)
		}
		if !strings.Contains(e.logs.String(), "stream ended without commit") {
			t.Errorf("the log does not say why the put was aborted:\n%s", e.logs.String())
		}
		t.Logf("%d batches sent before the half-close; requests %v", b, e.counter.Requests())
		e.nothingLeft(query, 0, worker)
	})
}

func commitMD(batches, rows int64) []byte {
	return []byte(fmt.Sprintf(`{"commit": {"batches": %d, "rows": %d}}`, batches, rows))
}

// ignoreCondition is a store that takes If-None-Match: * and does not
// enforce it (GCS's XML API, some gateways): real MinIO underneath.
type ignoreCondition struct{ store.Store }

func (s ignoreCondition) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	o.IfNoneMatch = false
	return s.Store.Put(ctx, key, body, o)
}

// TestCommitGuardInSidecar: on a store that ignores If-None-Match: *,
// /readyz is 503 and says why, the metric shows not_enforced, and a DoPut
// fails with FailedPrecondition naming the store, leaving nothing behind.
// On MinIO itself the guard passes and /readyz says so.
func TestCommitGuardInSidecar(t *testing.T) {
	ep := testenv.MinIO(t)
	withEndpoint := func(c *durashuffle.Config) { c.Store.Endpoint = ep.URL }
	bad := newEnv(t, ep, envOptions{cfg: withEndpoint, wrap: func(s store.Store) store.Store { return ignoreCondition{s} }})
	var code int
	var body string
	waitFor(t, "/readyz to give the guard's verdict", func() bool {
		code, body = get(t, bad.httpURL+"/readyz")
		return strings.Contains(body, "not ready: commit refused by the commit guard")
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "does not enforce If-None-Match: *") ||
		!strings.Contains(body, ep.URL) || !strings.Contains(body, "commit guard: not_enforced (") {
		t.Fatalf("/readyz on a store that ignores the condition: %d %q", code, body)
	}
	mf := scrape(t, bad.httpURL)
	if sum(mf, metrics.CommitGuard, map[string]string{"state": "not_enforced"}) != 1 || sum(mf, metrics.CommitGuard, nil) != 1 {
		t.Fatalf("%s: want not_enforced 1 and every other state 0, got %v", metrics.CommitGuard, mf[metrics.CommitGuard])
	}
	r, _ := genBatch("g", 0, 500, 16)
	_, err := putWorker(context.Background(), bad.sc, flightclient.PutCommand{Query: "q-guard", Worker: "g", Partitions: 2}, slices.Values([]partBatch{{1, r}}))
	wantCode(t, err, codes.FailedPrecondition, "does not enforce If-None-Match: *", ep.URL, "nothing was committed")
	bad.nothingLeft("q-guard", 0, "g")
	if !strings.Contains(bad.logs.String(), "every commit will be refused") {
		t.Errorf("the sidecar did not log the refusal:\n%s", bad.logs.String())
	}
	if n := bad.client.CommitGuard().Probes; n != 1 {
		t.Errorf("%d probes from readiness and a DoPut, want 1", n)
	}

	good := newEnv(t, ep, envOptions{cfg: withEndpoint})
	waitReady(t, good)
	if _, body := get(t, good.httpURL+"/readyz"); body != "ready\ncommit guard: enforced ("+ep.URL+", bucket "+ep.Bucket+")\n" {
		t.Fatalf("/readyz on MinIO: %q", body)
	}
	if v := sum(scrape(t, good.httpURL), metrics.CommitGuard, map[string]string{"state": "enforced"}); v != 1 {
		t.Fatalf(`%s{state="enforced"} = %v, want 1`, metrics.CommitGuard, v)
	}
}

// TestReadyzCommitGuardOff: with commit_guard off the sidecar sends no
// probe, is ready, and /readyz says that commits are not checked.
func TestReadyzCommitGuardOff(t *testing.T) {
	ep := testenv.MinIO(t)
	e := newEnv(t, ep, envOptions{cfg: func(c *durashuffle.Config) { c.Store.Endpoint, c.Store.CommitGuard = ep.URL, "off" }})
	waitReady(t, e)
	code, body := get(t, e.httpURL+"/readyz")
	want := "ready\ncommit guard: off (" + ep.URL + ", bucket " + ep.Bucket + ")\n" +
		"commit_guard is off: commits are not checked; on a store that ignores If-None-Match: * two attempts of a worker can both commit\n"
	if code != http.StatusOK || body != want {
		t.Fatalf("/readyz with commit_guard off: %d %q, want 200 %q", code, body, want)
	}
	if n := e.client.CommitGuard().Probes; n != 0 {
		t.Fatalf("%d commit guard probes with commit_guard off, want 0", n)
	}
}

// denyProbe refuses puts of the commit guard's probe key with 403 while
// deny is set, as credentials without s3:PutObject on the prefix would.
type denyProbe struct {
	store.Store
	deny atomic.Bool
}

func (s *denyProbe) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	if s.deny.Load() && strings.Contains(key, "~commit-guard/") {
		return &store.Error{Op: "PutObject", Key: key, Status: 403, Code: "AccessDenied", Err: errors.New("denied")}
	}
	return s.Store.Put(ctx, key, body, o)
}

// TestCommitGuardProbeFails: a probe that fails for another reason than
// the store taking the second put leaves the sidecar ready (the bucket
// answers), says so on /readyz, is not repeated every readiness interval,
// fails the DoPut that needs it with nothing committed, and is retried by
// the next DoPut, which commits once the store lets it.
func TestCommitGuardProbeFails(t *testing.T) {
	ep := testenv.MinIO(t)
	dp := &denyProbe{}
	dp.deny.Store(true)
	e := newEnv(t, ep, envOptions{wrap: func(s store.Store) store.Store { dp.Store = s; return dp }})
	waitReady(t, e)
	waitFor(t, "the guard's first probe", func() bool { return e.client.CommitGuard().State == "error" })
	time.Sleep(300 * time.Millisecond) // six readiness intervals
	code, body := get(t, e.httpURL+"/readyz")
	if code != http.StatusOK || !strings.Contains(body, "commit guard: error (") || !strings.Contains(body, "AccessDenied") {
		t.Fatalf("/readyz after a denied probe: %d %q", code, body)
	}
	if n := e.client.CommitGuard().Probes; n != 1 {
		t.Fatalf("%d probes in six readiness intervals, want 1", n)
	}
	put := func() (*flightclient.PutResult, error) {
		r, _ := genBatch("d", 0, 100, 8)
		return putWorker(context.Background(), e.sc, flightclient.PutCommand{Query: "q-deny", Worker: "d", Partitions: 1}, slices.Values([]partBatch{{0, r}}))
	}
	if _, err := put(); err == nil || !strings.Contains(err.Error(), "commit guard: probe") || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("DoPut while the probe is denied: %v, want the probe's AccessDenied", err)
	}
	e.nothingLeft("q-deny", 0, "d")
	dp.deny.Store(false)
	if res, err := put(); err != nil || !res.Committed {
		t.Fatalf("DoPut once the probe may put: %+v %v", res, err)
	}
	if g := e.client.CommitGuard(); g.State != "enforced" || e.client.CommitGuard().Probes != 3 {
		t.Fatalf("guard %q after %d probes, want enforced after 3 (readiness, two DoPuts)", g.State, e.client.CommitGuard().Probes)
	}
}
