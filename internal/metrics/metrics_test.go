package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/store"
)

// TestExposition: every metric of the operator's table is exposed under
// its documented name with its type, and moves with its events.
func TestExposition(t *testing.T) {
	m := metrics.New()
	c := &store.Counter{}
	m.WatchCounter(c)
	m.WatchConcurrency(func() int { return 6 })
	m.WatchConcurrency(func() int { return 99 }) // a second call is ignored

	m.Queued(3)
	m.Queued(-1)
	m.Buffered(16 << 20)
	m.PartDone(20*time.Millisecond, 300*time.Millisecond)
	m.Uploaded(8 << 20)
	c.Request("UploadPart", 200)
	c.Request("UploadPart", 503)
	c.Request("GetObject", 0)
	c.Retry("UploadPart", "SlowDown")

	want := `
# HELP durashuffle_buffered_bytes Bytes held in chunk buffers (filling, queued or uploading); at most max_buffered_chunks x chunk_size.
# TYPE durashuffle_buffered_bytes gauge
durashuffle_buffered_bytes 1.6777216e+07
# HELP durashuffle_requests_total Object-store requests sent, by SDK operation and HTTP status (none: no response arrived).
# TYPE durashuffle_requests_total counter
durashuffle_requests_total{code="200",op="UploadPart"} 1
durashuffle_requests_total{code="503",op="UploadPart"} 1
durashuffle_requests_total{code="none",op="GetObject"} 1
# HELP durashuffle_retries_total Object-store requests retried, by SDK operation and reason (service code, HTTPnnn, reset, timeout).
# TYPE durashuffle_retries_total counter
durashuffle_retries_total{op="UploadPart",reason="SlowDown"} 1
# HELP durashuffle_upload_bytes_total Bytes stored by finished parts and single puts.
# TYPE durashuffle_upload_bytes_total counter
durashuffle_upload_bytes_total 8.388608e+06
# HELP durashuffle_upload_concurrency Parts the upload pool lets in flight now (upload_concurrency, lowered while the store throttles).
# TYPE durashuffle_upload_concurrency gauge
durashuffle_upload_concurrency 6
# HELP durashuffle_upload_queue_chunks Parts encoded and waiting for an upload worker: a chunk each, or the parts an object's tail was re-cut into at Close.
# TYPE durashuffle_upload_queue_chunks gauge
durashuffle_upload_queue_chunks 2
`
	got := expose(t, m)
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("exposition lacks %q", line)
		}
	}
	for _, h := range []string{metrics.UploadQueuedSeconds, metrics.UploadPartSeconds} {
		if !strings.Contains(got, "# TYPE "+h+" histogram\n") || !strings.Contains(got, h+"_count 1\n") {
			t.Errorf("%s: not a histogram with one observation", h)
		}
	}

	// Reads are counted through the store wrapper.
	st := m.CountReads(fakeStore{})
	body, err := st.GetRange(context.Background(), "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, body)
	body.Close()
	if got := expose(t, m); !strings.Contains(got, metrics.ReadBytesTotal+" 11\n") {
		t.Fatalf("%s is not 11 after reading 11 bytes", metrics.ReadBytesTotal)
	}

	// The handler serves the private registry, Go and process collectors included.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, s := range []string{"durashuffle_upload_part_seconds_bucket", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(rec.Body.String(), s) {
			t.Errorf("/metrics has no %s", s)
		}
	}
}

// TestNil: a nil *Metrics ignores every event.
func TestNil(t *testing.T) {
	var m *metrics.Metrics
	m.Queued(1)
	m.Buffered(1)
	m.PartDone(time.Second, time.Second)
	m.Uploaded(1)
	m.ReadBytes(1)
	m.WatchCounter(&store.Counter{})
	m.WatchConcurrency(func() int { return 1 })
	m.Call("DoPut", "OK")
	m.PutDone(true)
	if st := m.CountReads(fakeStore{}); st != (fakeStore{}) {
		t.Fatal("nil Metrics wrapped the store")
	}
}

type fakeStore struct{ store.Store }

func (fakeStore) GetRange(context.Context, string, int64, int64) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("hello world")), nil
}

// expose renders the registry in the text format.
func expose(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestKnownLabelsStartAtZero: before any event, /metrics already has the
// labelled counters at 0 for the known label values (dashboards and
// alerts on rates see 0, not "no data"), and a counted event replaces
// its zero rather than standing beside it.
func TestKnownLabelsStartAtZero(t *testing.T) {
	m := metrics.New()
	c := &store.Counter{}
	m.WatchCounter(c)
	got := expose(t, m)
	for _, line := range []string{
		`durashuffle_retries_total{op="UploadPart",reason="SlowDown"} 0`,
		`durashuffle_retries_total{op="GetObject",reason="timeout"} 0`,
		`durashuffle_sidecar_calls_total{code="OK",method="DoPut"} 0`,
		`durashuffle_sidecar_calls_total{code="Unavailable",method="DoGet"} 0`,
		`durashuffle_sidecar_rows_total{method="DoGet"} 0`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("a fresh registry lacks %q", line)
		}
	}
	c.Retry("UploadPart", "SlowDown")
	got = expose(t, m)
	if n := strings.Count(got, `durashuffle_retries_total{op="UploadPart",reason="SlowDown"}`); n != 1 || !strings.Contains(got, `durashuffle_retries_total{op="UploadPart",reason="SlowDown"} 1`+"\n") {
		t.Errorf("after one retry: %d series for UploadPart/SlowDown, want the one at 1", n)
	}
}
