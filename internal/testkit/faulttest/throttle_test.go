package faulttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// sampler records a value every few milliseconds until stopped.
type sampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	vals []int
}

func sample(every time.Duration, f func() int) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			v := f()
			s.mu.Lock()
			s.vals = append(s.vals, v)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// end stops sampling and returns the samples, the last one taken now.
func (s *sampler) end() []int {
	close(s.stop)
	<-s.done
	return s.vals
}

// gaugeValue reads one gauge from a registry, as a scrape would.
func gaugeValue(t *testing.T, m *metrics.Metrics, name string) int {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Error(err)
		return -1
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return int(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	t.Errorf("metric %s not exported", name)
	return -1
}

// TestAdaptiveConcurrency throttles the store: above 10 requests a second
// the proxy answers SlowDown, as S3 does for a hot prefix. The pool must
// lower its effective concurrency below upload_concurrency (and export
// that as durashuffle_upload_concurrency), still commit everything, and
// once the throttling stops climb back to upload_concurrency.
func TestAdaptiveConcurrency(t *testing.T) {
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) {
		cfg := baseConfig()
		cfg.Write.UploadConcurrency = 8
		cfg.Write.MaxBufferedChunks = 16
		// Patient retries: under a hard rate limit a request may meet several
		// SlowDowns in a row before the pool has backed off.
		cfg.Store.RetryMaxAttempts = 30
		cfg.Store.RetryMaxDelay = cfg.Store.RetryMaxDelay * 5
		env := newEnv(t, e, cfg, faultproxy.Spec{RateLimit: 10, Burst: 2})
		c := env.client
		m := metrics.New()
		m.WatchConcurrency(func() int { return c.Stats().Concurrency })
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()

		// Phase 1, throttled: 3 workers, 8 parts in all.
		if got := gaugeValue(t, m, metrics.UploadConcurrency); got != 8 {
			t.Fatalf("%s = %d before any request, want upload_concurrency 8", metrics.UploadConcurrency, got)
		}
		pool := sample(2*time.Millisecond, func() int { return c.Stats().Concurrency })
		gauge := sample(20*time.Millisecond, func() int { return gaugeValue(t, m, metrics.UploadConcurrency) })
		big := stage{query: "throttled", workers: 3, partitions: 8, rows: 600_000, seed: 21, reuse: true}
		start := time.Now()
		bigWant, err := big.write(ctx, c)
		if err != nil {
			t.Fatalf("write while throttled: %v", err)
		}
		throttled := time.Since(start)
		poolVals, gaugeVals := pool.end(), gauge.end()
		low, lowGauge := minOf(poolVals), minOf(gaugeVals)
		slowdowns := env.faults().ByFault()[faultproxy.FaultThrottle]
		t.Logf("throttled phase: %v, %d SlowDown answers, pool concurrency min %d (%d samples), gauge min %d; retries %s",
			throttled.Round(time.Millisecond), slowdowns, low, len(poolVals), lowGauge, formatRetries(env.counter.Retries()))
		if slowdowns == 0 {
			t.Fatal("the proxy never throttled: the test proves nothing")
		}
		if low >= cfg.Write.UploadConcurrency || low < 1 {
			t.Errorf("effective concurrency stayed in [%d, %d] under throttling; want it lowered below %d and at least 1",
				low, maxOf(poolVals), cfg.Write.UploadConcurrency)
		}
		if lowGauge >= cfg.Write.UploadConcurrency {
			t.Errorf("%s never went below %d while throttled (min %d)", metrics.UploadConcurrency, cfg.Write.UploadConcurrency, lowGauge)
		}

		// Phase 2, unthrottled: 48 small outputs (one PutObject each through
		// the pool); every success grows the window by 1/window, so it is back
		// at 8 after at most 1+2+...+7 = 28 of them.
		if err := env.proxies[0].SetSpec(faultproxy.Spec{}); err != nil {
			t.Fatal(err)
		}
		before := c.Stats().Concurrency
		pool = sample(2*time.Millisecond, func() int { return c.Stats().Concurrency })
		small := stage{query: "recovered", workers: 48, partitions: 4, rows: 48 * 500, seed: 22}
		smallWant, err := small.write(ctx, c)
		if err != nil {
			t.Fatalf("write after throttling: %v", err)
		}
		poolVals = pool.end()
		after := c.Stats().Concurrency
		t.Logf("recovery phase: concurrency %d at start, %d at end, %d..%d sampled", before, after, minOf(poolVals), maxOf(poolVals))
		if after != cfg.Write.UploadConcurrency || gaugeValue(t, m, metrics.UploadConcurrency) != cfg.Write.UploadConcurrency {
			t.Errorf("concurrency %d after 48 unthrottled uploads, want it recovered to %d", after, cfg.Write.UploadConcurrency)
		}
		if before >= cfg.Write.UploadConcurrency {
			t.Logf("note: the window had already recovered to %d before phase 2", before)
		}

		// Both stages read back whole.
		got, err := big.read(ctx, c)
		if err != nil || lost(bigWant, got) != 0 {
			t.Fatalf("throttled stage read back: %v, lost %d rows", err, lost(bigWant, got))
		}
		got, err = small.read(ctx, c)
		if err != nil || lost(smallWant, got) != 0 {
			t.Fatalf("recovered stage read back: %v, lost %d rows", err, lost(smallWant, got))
		}
		ups, err := env.direct.ListUploads(ctx, "")
		if err != nil || len(ups) != 0 {
			t.Fatalf("open uploads %v, %v", ups, err)
		}
	})
}

func minOf(v []int) int {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []int) int {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
