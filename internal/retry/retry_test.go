package retry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// script is a store whose Put answers from a list of errors, and whose
// GetRange serves data but breaks bodies after cut bytes.
type script struct {
	store.Store
	errs  []error
	calls int
	data  []byte
	cut   int64 // each body breaks after this many bytes (0: never)
	opens []int64
}

func (s *script) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	s.calls++
	if len(s.errs) == 0 {
		return nil
	}
	err := s.errs[0]
	s.errs = s.errs[1:]
	return err
}

type breaking struct {
	r   io.Reader
	err error
}

func (b *breaking) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, b.err
	}
	return n, err
}
func (b *breaking) Close() error { return nil }

func (s *script) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	s.opens = append(s.opens, off)
	end := int64(len(s.data))
	if length >= 0 {
		end = off + length
	}
	if s.cut > 0 && off+s.cut < end {
		return &breaking{bytes.NewReader(s.data[off : off+s.cut]), syscall.ECONNRESET}, nil
	}
	return &breaking{bytes.NewReader(s.data[off:end]), io.EOF}, nil
}

func slowDown() error {
	return &store.Error{Op: "PutObject", Status: 503, Code: "SlowDown", Retryable: true}
}

func fast(n int) Policy {
	return Policy{MaxAttempts: n, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
}

func TestRetryClasses(t *testing.T) {
	forbidden := &store.Error{Op: "PutObject", Status: 403, Code: "AccessDenied"}
	cases := []struct {
		name      string
		errs      []error
		attempts  int
		wantCalls int
		wantErr   string
		retries   int64 // SlowDown retries counted
	}{
		{"success", nil, 3, 1, "", 0},
		{"slowdown then success", []error{slowDown(), slowDown()}, 3, 3, "", 2},
		{"4xx not retried", []error{forbidden}, 5, 1, "AccessDenied", 0},
		{"gives up", []error{slowDown(), slowDown(), slowDown()}, 3, 3, "gave up after 3 attempts", 2},
		{"cancelled not retried", []error{context.Canceled}, 5, 1, "context canceled", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inner := &script{errs: c.errs}
			counter := &store.Counter{}
			err := Wrap(inner, fast(c.attempts), counter).Put(context.Background(), "k", nil, store.PutOptions{})
			if inner.calls != c.wantCalls {
				t.Fatalf("%d calls, want %d", inner.calls, c.wantCalls)
			}
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			}
			if got := counter.Retries()[store.OpReason{Op: "PutObject", Reason: "SlowDown"}]; got != c.retries {
				t.Fatalf("%d retries counted, want %d", got, c.retries)
			}
		})
	}
}

func TestCancelledContextStopsBackoff(t *testing.T) {
	inner := &script{errs: []error{slowDown(), slowDown()}}
	ctx, cancel := context.WithCancel(context.Background())
	p := Policy{MaxAttempts: 5, BaseDelay: time.Hour, MaxDelay: time.Hour}
	done := make(chan error)
	go func() { done <- Wrap(inner, p, nil).Put(ctx, "k", nil, store.PutOptions{}) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backoff did not stop on cancel")
	}
}

func TestBackoffBounds(t *testing.T) {
	p := Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for n := 1; n <= 40; n++ {
		d := p.Backoff(n)
		window := min(p.BaseDelay<<min(n-1, 30), p.MaxDelay)
		if d < window/2 || d > window {
			t.Fatalf("retry %d: %v outside [%v, %v]", n, d, window/2, window)
		}
	}
}

func TestGetRangeResumesBrokenBody(t *testing.T) {
	data := make([]byte, 10_000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	inner := &script{data: data, cut: 3000}
	body, err := Wrap(inner, fast(8), nil).GetRange(context.Background(), "k", 500, 9000)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[500:9500]) {
		t.Fatalf("got %d bytes, want the exact 9000", len(got))
	}
	// Each reopen starts at the first byte not yet delivered.
	if want := []int64{500, 3500, 6500}; len(inner.opens) != 3 || inner.opens[1] != want[1] || inner.opens[2] != want[2] {
		t.Fatalf("opened at %v, want %v", inner.opens, want)
	}
}

func TestGetRangeGivesUp(t *testing.T) {
	inner := &script{data: make([]byte, 10_000), cut: 1000}
	body, err := Wrap(inner, fast(3), nil).GetRange(context.Background(), "k", 0, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(body)
	if err == nil || !strings.Contains(err.Error(), "body broke at byte 3000 after 3 attempts") {
		t.Fatalf("err = %v", err)
	}
}

func TestThrottling(t *testing.T) {
	for reason, want := range map[string]bool{
		"SlowDown": true, "SlowDownWrite": true, "SlowDownRead": true, "HTTP503": true, "HTTP429": true,
		// AWS-wide throttling codes the store retries are throttling too.
		"Throttling": true, "ThrottlingException": true, "RequestLimitExceeded": true,
		"InternalError": false, "reset": false, "timeout": false, "HTTP500": false,
	} {
		if got := Throttling(reason); got != want {
			t.Errorf("Throttling(%q) = %v, want %v", reason, got, want)
		}
	}
}

func TestReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&store.Error{Status: 503, Code: "SlowDownWrite"}, "SlowDownWrite"},
		{&store.Error{Status: 502}, "HTTP502"},
		{&store.Error{Err: syscall.ECONNRESET}, "reset"},
		{&store.Error{Err: syscall.ECONNREFUSED}, "refused"},
		{&store.Error{Err: io.ErrUnexpectedEOF}, "truncated"},
		{errors.New("something else"), "other"},
	} {
		if got := Reason(c.err); got != c.want {
			t.Errorf("Reason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// stallStore never answers a Put before the attempt's deadline.
type stallStore struct{ store.Store }

func (stallStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestGiveUpOnStalls: a request whose every attempt hit request_timeout
// gives up with a retryable store error, and its chain does not say
// DeadlineExceeded (that is the caller's deadline): an engine may run
// the task again. A caller's own deadline still ends it as such.
func TestGiveUpOnStalls(t *testing.T) {
	p := fast(3)
	p.Timeout = 5 * time.Millisecond
	err := Wrap(stallStore{}, p, nil).Put(context.Background(), "k", nil, store.PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "gave up after 3 attempts") || !strings.Contains(err.Error(), "RequestTimeout") {
		t.Fatalf("err = %v, want a give-up naming RequestTimeout", err)
	}
	if !store.IsTransient(err) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v: retryable %v, DeadlineExceeded %v", err, store.IsTransient(err), errors.Is(err, context.DeadlineExceeded))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
	defer cancel()
	p.Timeout = time.Hour
	if err := Wrap(stallStore{}, p, nil).Put(ctx, "k", nil, store.PutOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller's deadline: err = %v", err)
	}
}
