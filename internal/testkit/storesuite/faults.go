package storesuite

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// faultRate is the share of requests beyond each operation's first that
// meet a run's fault.
const faultRate = 0.05

// faultRuns are the fault matrix's runs: each fault kind on the first
// request of every operation and 5% of the others, answered in the
// store's own words (a reset while the request body is in flight, a
// response body cut short, the service's server error and its "slow
// down"), and a rate limit that throttles a burst.
var faultRuns = []struct {
	name string
	spec faultproxy.Spec
}{
	{"reset", faultproxy.Only(faultproxy.FaultReset, faultRate, 1)},
	{"truncate", faultproxy.Only(faultproxy.FaultTruncate, faultRate, 2)},
	{"internal", faultproxy.Only(faultproxy.FaultInternal, faultRate, 3)},
	{"slowdown", faultproxy.Only(faultproxy.FaultSlowDown, faultRate, 4)},
	{"throttle", faultproxy.Spec{RateLimit: 25, Burst: 5, Seed: 5}},
}

// Faults is the fault matrix: for each fault kind, a stage of two
// workers written (spill on), committed, sealed and read back through a
// fault proxy. Every run must end with exactly the rows written, every
// fault must have been met and retried, no upload may be left open, and
// the stage's prefix must hold exactly the objects its manifests name.
func Faults(t *testing.T, tg Target) {
	for _, run := range faultRuns {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			spec := run.spec
			ev := newEnv(t, tg, config(t, "on"), &spec)
			const q = "faults"
			wrote, err := writeStage(ctx, ev.client, q, small, true)
			if err != nil {
				t.Fatalf("write under %s: %v\nfaults: %v", spec, err, ev.proxy.Stats())
			}
			s, err := ev.client.OpenStage(ctx, q, 0)
			if err != nil {
				t.Fatalf("open under %s: %v", spec, err)
			}
			recs, err := s.ReadPartitions(ctx, nil)
			if err != nil {
				t.Fatalf("read under %s: %v", spec, err)
			}
			got, err := collect(recs)
			if err != nil {
				t.Fatalf("read under %s: %v\nfaults: %v", spec, err, ev.proxy.Stats())
			}
			sameRows(t, "the stage read under "+spec.String(), got, wrote.partitionOrder(nil))

			st := ev.proxy.Stats()
			if st.Total() == 0 || len(ev.counter.Retries()) == 0 {
				t.Errorf("%s: %d faults injected, retries %v: the run proved nothing", spec, st.Total(), ev.counter.Retries())
			}
			onlyReferenced(t, ev, q)
			t.Logf("%s: faults %v; retries %v", spec, st, ev.counter.Retries())
		})
	}
}

// onlyReferenced fails t for every upload left open and every object
// under query's prefix that its sealed stage does not name: each
// worker's data objects and manifest, the stage manifest and its index.
func onlyReferenced(t *testing.T, ev *env, query string) {
	t.Helper()
	ctx := context.Background()
	l := ev.client.Layout()
	m, err := manifest.LoadStage(ctx, ev.direct, l, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{l.StageManifestKey(query, 0): true}
	if m.Index != nil {
		want[l.ObjectKey(query, 0, m.Index.Key)] = true
	}
	for _, w := range m.Workers {
		want[l.WorkerManifestKey(query, 0, w.Worker)] = true
		for _, o := range w.Objects {
			want[l.ObjectKey(query, 0, o.Key)] = true
		}
	}
	keys := leftovers(t, ev.direct, l.QueryPrefix(query))
	for _, k := range keys {
		if !want[k] {
			t.Errorf("object left that the stage does not name: %s", k)
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("object the stage names is missing: %s", k)
	}
}

// Stalls holds a request in mid-body behind a fault proxy: a put whose
// body the server stops taking, and a read whose response body stops
// coming. The store, with a 2 s first-byte timeout, fails each within a
// few seconds with a transient error that says what stalled and names
// first_byte_timeout, and the retry layer above it then gets the request
// through.
func Stalls(t *testing.T, tg Target) {
	ctx := context.Background()
	const limit = 2 * time.Second
	spec := faultproxy.Spec{}
	ev := newEnv(t, tg, config(t, "on"), &spec)
	st := tg.Open(t, ev.proxy.URL()+tg.Path, ev.bucket, ev.counter, limit)
	retried := retry.Wrap(st, retry.Policy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond, Timeout: time.Minute}, ev.counter)
	// More than the sockets' buffers on both sides can hold: the write
	// blocks once the server stops reading.
	body := make([]byte, 24<<20)
	_, _ = rand.Read(body)
	stalled := func(t *testing.T, what string, err error, took time.Duration) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error through a stall", what)
		}
		if !store.IsTransient(err) || !strings.Contains(err.Error(), "stalled") || !strings.Contains(err.Error(), "first_byte_timeout 2s") {
			t.Fatalf("%s: %v; want a transient error saying what stalled and naming first_byte_timeout 2s", what, err)
		}
		if took > 15*limit {
			t.Errorf("%s: the stall took %v to cut, first_byte_timeout %v", what, took, limit)
		}
	}

	t.Run("request body", func(t *testing.T) {
		ev.proxy.Stall(faultproxy.Stall{Op: tg.Ops.Put, Nth: 1, Delay: time.Minute, Body: faultproxy.StallRequestBody})
		start := time.Now()
		err := st.Put(ctx, "stall/put", body, store.PutOptions{})
		stalled(t, "put", err, time.Since(start))
		ev.proxy.Stall(faultproxy.Stall{Op: tg.Ops.Put, Nth: 1, Delay: time.Minute, Body: faultproxy.StallRequestBody})
		before := sumRetries(ev.counter)
		if err := retried.Put(ctx, "stall/put", body, store.PutOptions{}); err != nil {
			t.Fatalf("put through the retry layer: %v", err)
		}
		if sumRetries(ev.counter) == before {
			t.Error("the retry layer got the put through without a retry: the stall was not met")
		}
		if got := readAll(t, ev.direct, "stall/put"); !bytes.Equal(got, body) {
			t.Fatalf("stored %d bytes, not the %d put", len(got), len(body))
		}
	})

	t.Run("response body", func(t *testing.T) {
		if err := ev.direct.Put(ctx, "stall/get", body, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		ev.proxy.Stall(faultproxy.Stall{Op: tg.Ops.Get, Nth: 1, Delay: time.Minute, Body: faultproxy.StallResponseBody})
		start := time.Now()
		rc, err := st.GetRange(ctx, "stall/get", 0, int64(len(body)))
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		stalled(t, "read", err, time.Since(start))
		if got := readAll(t, st, "stall/get"); !bytes.Equal(got, body) {
			t.Fatalf("read %d bytes after the stall, not the %d stored", len(got), len(body))
		}
	})
	if n := ev.proxy.Stats().ByFault()[faultproxy.FaultStall]; n != 3 {
		t.Errorf("%d stalls met, want 3", n)
	}
}

func sumRetries(c *store.Counter) int64 {
	var n int64
	for _, v := range c.Retries() {
		n += v
	}
	return n
}

func readAll(t *testing.T, st store.Reader, key string) []byte {
	t.Helper()
	rc, err := st.GetRange(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}
