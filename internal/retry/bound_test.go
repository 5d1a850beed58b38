package retry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// TestMaxBackoffs: the longest the backoffs of one failed request add up
// to, which the documented timeout bounds are made of.
func TestMaxBackoffs(t *testing.T) {
	p := Policy{MaxAttempts: 8, BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second}
	// 0.1 + 0.2 + 0.4 + 0.8 + 1.6 + 3.2 + 5 (capped 6.4)
	if got, want := p.MaxBackoffs(), 11300*time.Millisecond; got != want {
		t.Errorf("MaxBackoffs() = %v, want %v", got, want)
	}
	for n := 1; n < p.MaxAttempts; n++ {
		for range 100 {
			if d := p.Backoff(n); d > p.window(n) || d < p.window(n)/2 {
				t.Fatalf("Backoff(%d) = %v, outside [%v, %v]", n, d, p.window(n)/2, p.window(n))
			}
		}
	}
	if got := (Policy{MaxAttempts: 1, BaseDelay: time.Second}).MaxBackoffs(); got != 0 {
		t.Errorf("one attempt backs off %v", got)
	}
}

// hangs fails its first Put with a retryable error and blocks the next
// until its context ends, as an endpoint that went silent.
type hangs struct {
	store.Store
	calls int
}

func (h *hangs) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	h.calls++
	if h.calls == 1 {
		return &store.Error{Op: "PutObject", Key: key, Retryable: true, Err: errors.New("endpoint 127.0.0.1:1: no TCP connection within connect_timeout 5s")}
	}
	<-ctx.Done()
	return &store.Error{Op: "PutObject", Key: key, Err: ctx.Err()}
}

// TestCutByCallerSaysWhy: when the caller's deadline ends an attempt,
// the error still says what the attempt before it met (the store's
// silence, not only "context deadline exceeded"), and is the caller's
// deadline: not retryable.
func TestCutByCallerSaysWhy(t *testing.T) {
	s := Wrap(&hangs{}, Policy{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err := s.Put(ctx, "k", nil, store.PutOptions{})
	if !errors.Is(err, context.DeadlineExceeded) || store.IsTransient(err) {
		t.Fatalf("Put = %v, want the caller's deadline, not retryable", err)
	}
	for _, want := range []string{"stopped by the caller in attempt 2", "attempt 1: PutObject k: endpoint 127.0.0.1:1: no TCP connection within connect_timeout 5s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
}
