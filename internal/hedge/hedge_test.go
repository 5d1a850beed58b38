package hedge

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/testkit/leaktest"
)

// warm gives h its warmup samples of d. Tests that tell the first run
// from the hedge by the order fn is entered use a d of tens of
// milliseconds: the hedge must not start before the first run's
// goroutine has, however loaded the machine.
func warm(h *Hedger, d time.Duration) {
	for range h.Warmup {
		h.observe(d, 0)
	}
}

func TestNoHedgeBeforeWarmup(t *testing.T) {
	h := New(3, time.Millisecond)
	var calls atomic.Int32
	h.Do(context.Background(), func(context.Context) error {
		calls.Add(1)
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	if calls.Load() != 1 {
		t.Fatalf("%d calls before any latency was known", calls.Load())
	}
}

func TestStuckRequestIsHedgedOnce(t *testing.T) {
	h := New(3, time.Millisecond)
	warm(h, 20*time.Millisecond)
	if d := h.Delay(); d != 60*time.Millisecond {
		t.Fatalf("delay %v, want 3 x p90", d)
	}
	var calls atomic.Int32
	var cancelled atomic.Bool
	start := time.Now()
	err := h.Do(context.Background(), func(ctx context.Context) error {
		if calls.Add(1) == 1 { // the first attempt hangs until cancelled
			<-ctx.Done()
			cancelled.Store(true)
			return ctx.Err()
		}
		return nil
	})
	if err != nil || calls.Load() != 2 || !cancelled.Load() {
		t.Fatalf("err %v, calls %d, loser cancelled %v", err, calls.Load(), cancelled.Load())
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("hedge did not rescue the stuck request")
	}
	if hedged, won := h.Stats(); hedged != 1 || won != 1 {
		t.Fatalf("stats %d %d", hedged, won)
	}
}

func TestBothFailReturnsFirstError(t *testing.T) {
	h := New(1, time.Millisecond)
	warm(h, 50*time.Millisecond)
	first := errors.New("first")
	var calls atomic.Int32
	err := h.Do(context.Background(), func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond)
			return first
		}
		return errors.New("second")
	})
	if !errors.Is(err, first) || calls.Load() != 2 {
		t.Fatalf("err %v calls %d", err, calls.Load())
	}
}

func TestFastRequestsAreNotDoubled(t *testing.T) {
	h := New(3, 50*time.Millisecond)
	warm(h, time.Millisecond)
	var calls atomic.Int32
	for range 100 {
		h.Do(context.Background(), func(context.Context) error { calls.Add(1); return nil })
	}
	if calls.Load() != 100 {
		t.Fatalf("%d calls for 100 requests", calls.Load())
	}
}

func wantPanic(t *testing.T, err error, op, value string) {
	t.Helper()
	var pe *safe.PanicError
	if !errors.As(err, &pe) || pe.Op != op || !strings.Contains(err.Error(), value) || !strings.Contains(pe.At, "hedge_test.go:") {
		t.Fatalf("Do: %v, want a PanicError of %q with %q, at its site in hedge_test.go", err, op, value)
	}
}

// TestPanicFailsDo: a panic in fn, run inline or in either of Do's
// goroutines, is Do's error, never the process's end; a panic in the run
// that lost is not hidden by the winner's success; Do still waits for
// both runs.
func TestPanicFailsDo(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Run("inline", func(t *testing.T) {
		h := New(3, time.Millisecond)
		err := h.Do(context.Background(), func(context.Context) error { panic("a bug in the request") })
		wantPanic(t, err, "a request", "a bug in the request")
	})
	t.Run("the hedge panics while the first run hangs", func(t *testing.T) {
		h := New(1, time.Millisecond)
		warm(h, 50*time.Millisecond)
		var calls atomic.Int32
		var cancelled atomic.Bool
		err := h.Do(context.Background(), func(ctx context.Context) error {
			if calls.Add(1) == 1 {
				<-ctx.Done()
				cancelled.Store(true)
				return ctx.Err()
			}
			panic("a bug in the hedge")
		})
		wantPanic(t, err, "the hedge of a request", "a bug in the hedge")
		if !cancelled.Load() {
			t.Fatal("Do returned before the first run was cancelled and returned")
		}
	})
	t.Run("the loser panics after the winner succeeded", func(t *testing.T) {
		h := New(1, time.Millisecond)
		warm(h, 50*time.Millisecond)
		var calls atomic.Int32
		hedging := make(chan struct{})
		err := h.Do(context.Background(), func(ctx context.Context) error {
			if calls.Add(1) == 1 {
				<-hedging // succeed once the hedge runs
				return nil
			}
			close(hedging)
			<-ctx.Done() // cancelled by the first run's success
			panic("a bug in the cancelled hedge")
		})
		wantPanic(t, err, "the hedge of a request", "a bug in the cancelled hedge")
		if _, won := h.Stats(); won != 0 {
			t.Fatalf("won %d: a hedge that panicked counted as a win", won)
		}
	})
	t.Run("an error wrapping a recovered panic", func(t *testing.T) {
		h := New(1, time.Millisecond)
		warm(h, 50*time.Millisecond)
		var calls atomic.Int32
		hedging := make(chan struct{})
		err := h.Do(context.Background(), func(ctx context.Context) error {
			if calls.Add(1) == 1 {
				// fn recovered a panic of its own goroutine and returns it.
				err := safe.Call(func() error { panic("a bug in a receiver") }, "a receiver")
				<-hedging
				return fmt.Errorf("read k: %w", err)
			}
			close(hedging)
			return nil
		})
		// The hedge succeeded, but the first run's panic fails Do.
		if !safe.IsPanic(err) || !strings.Contains(err.Error(), "read k: panic in a receiver: a bug in a receiver") {
			t.Fatalf("Do: %v, want the first run's recovered panic", err)
		}
	})
	leaktest.Settled(t, base)
}

// TestDelayScalesWithSize: a request larger than its peers is late only
// against their latencies scaled to its size, so a large part taking as
// long per byte as small ones is sent once; a smaller or unsized request
// is late against their latencies as they are.
func TestDelayScalesWithSize(t *testing.T) {
	h := New(3, time.Millisecond)
	for range h.Warmup {
		h.observe(20*time.Millisecond, 8<<20)
	}
	for _, tc := range []struct {
		bytes int64
		want  time.Duration
	}{{0, 60 * time.Millisecond}, {1 << 20, 60 * time.Millisecond}, {8 << 20, 60 * time.Millisecond}, {64 << 20, 480 * time.Millisecond}} {
		if d := h.DelayFor(tc.bytes); d != tc.want {
			t.Errorf("delay of a request of %d bytes: %v, want %v", tc.bytes, d, tc.want)
		}
	}
	var calls atomic.Int32
	// 32x its peers' size, 20x their latency: faster per byte, and 1.5 s
	// short of its delay (1.92 s), however loaded the machine.
	err := h.DoSized(context.Background(), 256<<20, func(context.Context) error {
		calls.Add(1)
		time.Sleep(400 * time.Millisecond)
		return nil
	})
	if err != nil || calls.Load() != 1 {
		t.Fatalf("a request 32x its peers' size taking 20x their time: err %v, %d calls, want 1", err, calls.Load())
	}
	if hedged, _ := h.Stats(); hedged != 0 {
		t.Fatalf("%d hedged, want 0", hedged)
	}
}
