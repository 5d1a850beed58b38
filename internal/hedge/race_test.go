package hedge

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/testkit/leaktest"
)

// scripted is an attempt driven by the test: it starts, then returns
// what is sent on answer, or once its context is cancelled, what
// onCancel returns (its name and the context's error unless set).
type scripted struct {
	name     string
	started  chan struct{}
	returned chan struct{}
	answer   chan func() (string, error)
	onCancel func() (string, error)
}

func newScripted(name string) *scripted {
	return &scripted{name: name, started: make(chan struct{}), returned: make(chan struct{}), answer: make(chan func() (string, error), 1)}
}

func (s *scripted) run(ctx context.Context) (string, error) {
	close(s.started)
	defer close(s.returned)
	select {
	case f := <-s.answer:
		return f()
	case <-ctx.Done():
		if s.onCancel != nil {
			return s.onCancel()
		}
		return s.name + " cancelled", ctx.Err()
	}
}

func (s *scripted) succeed() { s.answer <- func() (string, error) { return s.name, nil } }

// fail makes the attempt fail and waits until it has returned.
func (s *scripted) fail(err error) {
	s.answer <- func() (string, error) { return s.name + " partial", err }
	<-s.returned
}
func (s *scripted) bug() (string, error) { panic("a bug in " + s.name) }

func (s *scripted) hasStarted() bool {
	select {
	case <-s.started:
		return true
	default:
		return false
	}
}

// TestRace drives both attempts of a race through each way it ends and
// checks the outcome: winner, value, errors, what was released and
// whether the second attempt ran.
func TestRace(t *testing.T) {
	errA, errB := errors.New("first broke"), errors.New("second broke")
	for _, c := range []struct {
		name string
		// fires: the race's delay is a millisecond, and play starts by
		// waiting for the second attempt to run; otherwise it is an hour.
		fires bool
		play  func(a, b *scripted) // once the first attempt runs
		won   Which
		value string
		// each attempt's error (nil: none), for a race without a panic
		firstErr, secondErr error
		panicOp             string // the attempt whose panic is the outcome
		released            []string
		errText             string // Err() without a winner
	}{
		{name: "the first answers before the delay", play: func(a, b *scripted) { a.succeed() },
			won: First, value: "first"},
		{name: "the first fails before the delay: no second attempt", play: func(a, b *scripted) { a.fail(errA) },
			firstErr: errA, errText: "first broke"},
		{name: "the second wins, the first is cancelled and released", fires: true, play: func(a, b *scripted) { b.succeed() },
			won: Second, value: "second", firstErr: context.Canceled, released: []string{"first cancelled"}},
		{name: "the first wins after the second started", fires: true, play: func(a, b *scripted) { a.succeed() },
			won: First, value: "first", secondErr: context.Canceled, released: []string{"second cancelled"}},
		{name: "the first fails, then the second wins", fires: true, play: func(a, b *scripted) { a.fail(errA); b.succeed() },
			won: Second, value: "second", firstErr: errA, released: []string{"first partial"}},
		{name: "the second fails, then the first wins", fires: true, play: func(a, b *scripted) { b.fail(errB); a.succeed() },
			won: First, value: "first", secondErr: errB, released: []string{"second partial"}},
		{name: "both fail: both errors, values kept", fires: true, play: func(a, b *scripted) { b.fail(errB); a.fail(errA) },
			firstErr: errA, secondErr: errB, errText: "first broke (its hedge failed too: second broke)"},
		{name: "the second panics while the first hangs", fires: true, play: func(a, b *scripted) { b.answer <- b.bug },
			panicOp: "the second", released: []string{"first cancelled", ""}},
		{name: "the loser panics once cancelled", fires: true, play: func(a, b *scripted) { b.onCancel = b.bug; a.succeed() },
			panicOp: "the second", released: []string{"first", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			a, b := newScripted("first"), newScripted("second")
			var released []string // Release runs on Run's goroutine
			seconds := 0
			r := Race[string]{First: a.run, Second: b.run, FirstOp: "the first", SecondOp: "the second",
				Delay: time.Hour, Release: func(v string) { released = append(released, v) }, OnSecond: func() { seconds++ }}
			if c.fires {
				r.Delay = time.Millisecond
			}
			done := make(chan Outcome[string])
			go func() { done <- r.Run(context.Background()) }()
			<-a.started
			if c.fires {
				<-b.started
			}
			c.play(a, b)
			o := <-done
			if o.Won != c.won || o.Value() != c.value {
				t.Fatalf("won %v with %q, want %v with %q", o.Won, o.Value(), c.won, c.value)
			}
			if o.Second.Ran != c.fires || b.hasStarted() != c.fires || seconds != map[bool]int{true: 1}[c.fires] {
				t.Fatalf("second attempt ran %v (started %v, OnSecond %d times), want %v", o.Second.Ran, b.hasStarted(), seconds, c.fires)
			}
			if !slices.Equal(released, c.released) {
				t.Fatalf("released %q, want %q", released, c.released)
			}
			if c.panicOp != "" {
				var pe *safe.PanicError
				if !errors.As(o.Err(), &pe) || pe.Op != c.panicOp || !strings.Contains(pe.At, "race_test.go:") || o.Panic != o.Err() {
					t.Fatalf("Err() = %v, want a panic in %s at its site in race_test.go", o.Err(), c.panicOp)
				}
				if o.Won != None || o.First.Value != "" || o.Second.Value != "" {
					t.Fatalf("after a panic: won %v, values %q %q kept", o.Won, o.First.Value, o.Second.Value)
				}
				leaktest.Settled(t, base)
				return
			}
			for _, e := range []struct {
				which     string
				got, want error
			}{{"first", o.First.Err, c.firstErr}, {"second", o.Second.Err, c.secondErr}} {
				if (e.want == nil) != (e.got == nil) || !errors.Is(e.got, e.want) {
					t.Fatalf("%s attempt's error %v, want %v", e.which, e.got, e.want)
				}
			}
			if c.won != None {
				if o.Err() != nil || o.Elapsed <= 0 {
					t.Fatalf("with a winner: Err() %v, elapsed %v", o.Err(), o.Elapsed)
				}
			} else {
				err := o.Err()
				if err == nil || err.Error() != c.errText || !errors.Is(err, c.firstErr) || c.secondErr != nil && !errors.Is(err, c.secondErr) {
					t.Fatalf("Err() = %v, want %q wrapping each attempt's error", err, c.errText)
				}
				// Both failed: their values (what arrived) are the
				// caller's.
				if o.First.Value != "first partial" || c.fires && o.Second.Value != "second partial" {
					t.Fatalf("values %q and %q, want each attempt's partial answer", o.First.Value, o.Second.Value)
				}
			}
			leaktest.Settled(t, base)
		})
	}
}

// TestRaceInline: without a delay the first attempt runs on the caller's
// goroutine and the second never runs.
func TestRaceInline(t *testing.T) {
	var secondRan bool
	r := Race[int]{
		First:  func(context.Context) (int, error) { return 7, nil },
		Second: func(context.Context) (int, error) { secondRan = true; return 0, nil },
	}
	o := r.Run(context.Background())
	if o.Won != First || o.Value() != 7 || secondRan || o.Second.Ran {
		t.Fatalf("won %v with %d, second ran %v", o.Won, o.Value(), secondRan)
	}
	r.First = func(context.Context) (int, error) { panic("inline bug") }
	r.FirstOp = "the inline attempt"
	o = r.Run(context.Background())
	var pe *safe.PanicError
	if !errors.As(o.Err(), &pe) || pe.Op != "the inline attempt" || o.Won != None {
		t.Fatalf("inline panic: %v, won %v", o.Err(), o.Won)
	}
}

// TestHedgedKeepsTheRecord: a race under a Hedger takes its delay once
// warm, counts a fired second attempt and its win, and learns the
// winner's latency.
func TestHedgedKeepsTheRecord(t *testing.T) {
	h := New(2, time.Millisecond)
	var hooks int
	h.OnHedge = func() { hooks++ }
	quick := func(context.Context) (string, error) { return "quick", nil }
	for range h.Warmup - 1 {
		if o := Hedged(context.Background(), h, Race[string]{First: quick, Second: quick}); o.Won != First {
			t.Fatalf("won %v before warmup", o.Won)
		}
	}
	if h.Delay() != 0 {
		t.Fatalf("delay %v after %d samples, want none before %d", h.Delay(), h.Warmup-1, h.Warmup)
	}
	Hedged(context.Background(), h, Race[string]{First: quick, Second: quick})
	if h.Delay() <= 0 {
		t.Fatal("no delay after the warmup samples")
	}
	stuck := func(ctx context.Context) (string, error) { <-ctx.Done(); return "", ctx.Err() }
	o := Hedged(context.Background(), h, Race[string]{First: stuck, Second: quick})
	if o.Won != Second || o.Value() != "quick" || !errors.Is(o.First.Err, context.Canceled) {
		t.Fatalf("won %v with %q, first %v; want the second to win and the first cancelled", o.Won, o.Value(), o.First.Err)
	}
	if hedged, won := h.Stats(); hedged != 1 || won != 1 || hooks != 1 {
		t.Fatalf("hedged %d, won %d, OnHedge %d; want 1 each", hedged, won, hooks)
	}
}
