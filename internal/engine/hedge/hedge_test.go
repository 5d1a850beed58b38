package hedge

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func warm(h *Hedger, d time.Duration) {
	for range h.Warmup {
		h.observe(d)
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
	warm(h, 2*time.Millisecond)
	if d := h.Delay(); d != 6*time.Millisecond {
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
	warm(h, time.Millisecond)
	first := errors.New("first")
	var calls atomic.Int32
	err := h.Do(context.Background(), func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			time.Sleep(30 * time.Millisecond)
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
