package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// probed runs c's commit guard and checks that it passed at the cost of
// one probe: two conditional PutObjects and a delete. It returns the
// request counts after it, so a test can count its own requests alone.
func probed(t *testing.T, c *durashuffle.Client) map[string]int64 {
	t.Helper()
	before := c.Counter().Requests()
	if err := c.CheckCommitGuard(context.Background()); err != nil {
		t.Fatalf("commit guard: %v", err)
	}
	after := c.Counter().Requests()
	if d := reqs.Diff(after, before); fmt.Sprint(d) != "map[DeleteObjects:1 PutObject:2]" || c.CommitGuard().Probes != 1 {
		t.Fatalf("commit guard probe: requests %v and %d probes, want 2 PutObject, 1 DeleteObjects, 1 probe", d, c.CommitGuard().Probes)
	}
	return after
}

// ignoreCondition is a store that takes If-None-Match: * and does not
// enforce it, like GCS's XML API or some S3 gateways: a conditional put
// of an existing key overwrites it. Real MinIO underneath.
type ignoreCondition struct{ store.Store }

func (s ignoreCondition) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	o.IfNoneMatch = false
	return s.Store.Put(ctx, key, body, o)
}

// guardEnv is a client of a fresh MinIO bucket through wrap, and the raw
// store beneath it for checking what is stored.
func guardEnv(t *testing.T, wrap func(store.Store) store.Store, mut func(*durashuffle.Config)) (*durashuffle.Client, store.Store, testenv.Endpoint) {
	t.Helper()
	ep := testenv.MinIO(t)
	raw, counter := ep.NewStore(t)
	cfg := testConfig()
	cfg.Store.Endpoint, cfg.Store.Bucket, cfg.Store.Prefix = ep.URL, ep.Bucket, "g"
	cfg.Store.RetryMaxAttempts = 2
	if mut != nil {
		mut(&cfg)
	}
	c := testenv.Client(t, cfg, durashuffle.WithStore(wrap(raw)), durashuffle.WithCounter(counter))
	t.Cleanup(c.Close)
	return c, raw, ep
}

// commitOne writes a few thousand rows as worker and commits them.
func commitOne(c *durashuffle.Client, worker string) (*manifest.Worker, error) {
	w, err := c.NewWriter(context.Background(), durashuffle.WriterOptions{Query: "qg", Worker: worker, Partitions: 4})
	if err != nil {
		return nil, err
	}
	if err := writeRows(w, 3000, 4); err != nil {
		return nil, errors.Join(err, w.Abort())
	}
	return w.Commit(context.Background())
}

// TestCommitGuardRefusesUnenforcingStore: on a store that ignores
// If-None-Match: *, every commit and seal fails with an error that says
// so and names the endpoint, after one probe; nothing is left: no worker
// manifest, no data object, no upload, no probe key.
func TestCommitGuardRefusesUnenforcingStore(t *testing.T) {
	c, raw, ep := guardEnv(t, func(s store.Store) store.Store { return ignoreCondition{s} }, nil)
	ctx := context.Background()
	if g := c.CommitGuard(); g.State != durashuffle.GuardUnprobed {
		t.Fatalf("before a commit the guard is %q, want unprobed", g.State)
	}
	for _, worker := range []string{"0", "1"} {
		_, err := commitOne(c, worker)
		if !errors.Is(err, durashuffle.ErrCommitGuard) {
			t.Fatalf("commit of worker %s: %v, want ErrCommitGuard", worker, err)
		}
		for _, want := range []string{"does not enforce If-None-Match: *", ep.URL, "bucket " + ep.Bucket,
			"nothing was committed", "commit_guard: off", "worker " + worker + " of qg stage 0"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("commit error %q does not say %q", err, want)
			}
		}
	}
	_, err := c.Seal(ctx, "qg", 0, 2)
	if !errors.Is(err, durashuffle.ErrCommitGuard) {
		t.Fatalf("seal: %v, want ErrCommitGuard", err)
	}
	if n := c.CommitGuard().Probes; n != 1 {
		t.Errorf("%d probes for two commits and a seal, want 1: a definite answer is kept", n)
	}
	if g := c.CommitGuard(); g.State != durashuffle.GuardNotEnforced || !errors.Is(g.Err, durashuffle.ErrCommitGuard) {
		t.Errorf("guard status %+v, want not_enforced", g)
	}
	for _, worker := range []string{"0", "1"} {
		if _, err := manifest.LoadWorker(ctx, raw, c.Layout(), "qg", 0, worker); !store.IsNotFound(err) {
			t.Errorf("worker %s manifest after a refused commit: %v, want not found", worker, err)
		}
	}
	objs, _, err := raw.List(ctx, "", "")
	if err != nil || len(objs) != 0 {
		t.Errorf("objects left in the bucket: %v %v", objs, err)
	}
	ups, err := raw.ListUploads(ctx, "")
	if err != nil || len(ups) != 0 {
		t.Errorf("uploads left open: %v %v", ups, err)
	}

	// commit_guard off, on the same kind of store: the operator vouches
	// for it, so commits go ahead without a probe.
	off, _, _ := guardEnv(t, func(s store.Store) store.Store { return ignoreCondition{s} },
		func(c *durashuffle.Config) { c.Store.CommitGuard = "off" })
	if _, err := commitOne(off, "0"); err != nil {
		t.Fatalf("commit with commit_guard off: %v", err)
	}
	if off.CommitGuard().Probes != 0 || off.CommitGuard().State != durashuffle.GuardOff {
		t.Fatalf("commit_guard off: %d probes, state %q", off.CommitGuard().Probes, off.CommitGuard().State)
	}
}

// failProbe fails the first n puts of the guard's probe key with a
// retryable 503, like a store that is briefly unavailable.
type failProbe struct {
	store.Store
	n atomic.Int64
}

func (s *failProbe) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	if strings.Contains(key, "~commit-guard/") && s.n.Add(-1) >= 0 {
		return &store.Error{Op: "PutObject", Key: key, Status: 503, Code: "ServiceUnavailable", Retryable: true, Err: errors.New("injected")}
	}
	return s.Store.Put(ctx, key, body, o)
}

// TestCommitGuardRetriesFailedProbe: a probe that fails for a transient
// reason fails that commit (nothing committed) without a verdict on the
// store; the next commit probes again and goes ahead.
func TestCommitGuardRetriesFailedProbe(t *testing.T) {
	fp := &failProbe{}
	fp.n.Store(2) // retry_max_attempts 2: the first probe's put fails for good
	c, raw, ep := guardEnv(t, func(s store.Store) store.Store { fp.Store = s; return fp }, nil)
	_, err := commitOne(c, "0")
	if err == nil || errors.Is(err, durashuffle.ErrCommitGuard) || !strings.Contains(err.Error(), "commit guard: probe") ||
		!strings.Contains(err.Error(), "HTTP 503") || !strings.Contains(err.Error(), ep.URL) {
		t.Fatalf("commit while the probe fails: %v, want the probe's 503 naming %s", err, ep.URL)
	}
	if g := c.CommitGuard(); g.State != durashuffle.GuardError {
		t.Fatalf("after a failed probe the guard is %q, want error", g.State)
	}
	if _, err := manifest.LoadWorker(context.Background(), raw, c.Layout(), "qg", 0, "0"); !store.IsNotFound(err) {
		t.Fatalf("worker manifest after a failed probe: %v", err)
	}
	if _, err := commitOne(c, "0"); err != nil {
		t.Fatalf("commit after the store recovered: %v", err)
	}
	if c.CommitGuard().Probes != 2 || c.CommitGuard().State != durashuffle.GuardEnforced {
		t.Fatalf("%d probes, state %q; want 2 and enforced", c.CommitGuard().Probes, c.CommitGuard().State)
	}
}

// TestCommitGuardOneProbe: many writers committing at once on a fresh
// client share one probe of a store that enforces the condition (MinIO
// and the embedded server), and all commit.
func TestCommitGuardOneProbe(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ep := b.Start(t)
			st, counter := ep.NewStore(t)
			c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
			defer c.Close()
			// What the probe costs on its own, on a client of its own.
			solo := testenv.Client(t, testConfig(), durashuffle.WithStore(st))
			start := time.Now()
			if err := solo.CheckCommitGuard(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Logf("one probe (2 PutObject, 1 DeleteObjects): %v", time.Since(start).Round(10*time.Microsecond))
			solo.Close()
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Go(func() { _, errs[i] = commitOne(c, fmt.Sprint(i)) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if c.CommitGuard().Probes != 1 || c.CommitGuard().State != durashuffle.GuardEnforced {
				t.Fatalf("8 concurrent commits: %d probes, state %q; want 1 and enforced", c.CommitGuard().Probes, c.CommitGuard().State)
			}
			// The probe key is gone: only the layout's keys remain.
			objs, _, err := st.List(context.Background(), "", "")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if strings.Contains(o.Key, "~") {
					t.Errorf("probe key left behind: %s", o.Key)
				}
			}
		})
	}
}
