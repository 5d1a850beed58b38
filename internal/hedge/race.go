package hedge

import (
	"context"
	"fmt"
	"time"

	"github.com/durashuffle/durashuffle/internal/safe"
)

// Attempt is one way to make a request. It returns its answer, or why it
// failed together with whatever it holds (bytes that arrived before the
// failure), and returns soon once ctx ends.
type Attempt[T any] func(ctx context.Context) (T, error)

// Race is a request that may be made twice: First runs at once and, if
// it has neither succeeded nor failed after Delay, Second runs beside it.
// The first success wins and the other attempt is cancelled. Both
// attempts may be the same function (a request re-issued) or different
// ones (a fast source hedged by the object store).
type Race[T any] struct {
	First, Second Attempt[T]
	// FirstOp and SecondOp name the attempts in the *safe.PanicError of a
	// panic in them ("a request", "the hedge of a request").
	FirstOp, SecondOp string
	// Delay is how long First runs alone. 0 (or no Second): Second never
	// runs and First runs on the caller's goroutine. A fixed value, or an
	// adaptive one from a Hedger (Hedged, Hedger.Delay).
	Delay time.Duration
	// Bytes is the request's size for a Hedger's delay and samples
	// (Hedged); 0: not sized.
	Bytes int64
	// OnSecond, if set, is called as Second starts.
	OnSecond func()
	// h, set by Hedged, counts the second attempt.
	h *Hedger
	// Release, if set, frees the value of an attempt that Run does not
	// hand over: the loser's, whether it failed or also succeeded, and
	// every attempt's when one panicked. It runs after that attempt has
	// returned, so nothing else refers to what it releases.
	Release func(T)
}

// Which names an attempt of a Race.
type Which int

// The attempts of a Race, as Outcome.Won reports the winner.
const (
	None Which = iota
	First
	Second
)

func (w Which) String() string {
	switch w {
	case First:
		return "first"
	case Second:
		return "second"
	}
	return "none"
}

// Try is what one attempt of a Race returned.
type Try[T any] struct {
	Ran   bool
	Value T // zero once Release took it
	Err   error
}

// Outcome is how a Race ended. Exactly one of these holds:
//   - Won is First or Second: that attempt succeeded first and its Value
//     is the answer; the other was cancelled and its value released.
//   - Panic is set: an attempt panicked (or returned an error wrapping a
//     recovered panic), whatever the other did; every value was released.
//   - Both attempts that ran failed: First.Err and, if Second ran,
//     Second.Err say why, and their values are the caller's.
type Outcome[T any] struct {
	First, Second Try[T]
	Won           Which
	Panic         error
	// Elapsed is the time from the start of the race to the winner's
	// success (0 without a winner).
	Elapsed time.Duration
}

// Value is the winner's value (the zero T without a winner).
func (o *Outcome[T]) Value() T {
	switch o.Won {
	case First:
		return o.First.Value
	case Second:
		return o.Second.Value
	}
	var zero T
	return zero
}

// Err is nil with a winner; otherwise the panic, or the error of First
// alone when Second never ran, or a *BothFailed holding both errors.
func (o *Outcome[T]) Err() error {
	switch {
	case o.Panic != nil:
		return o.Panic
	case o.Won != None:
		return nil
	case o.Second.Ran:
		return &BothFailed{First: o.First.Err, Second: o.Second.Err}
	}
	return o.First.Err
}

// BothFailed is the error of a Race whose two attempts both failed.
// errors.Is and errors.As see both.
type BothFailed struct{ First, Second error }

func (e *BothFailed) Error() string {
	return fmt.Sprintf("%v (its hedge failed too: %v)", e.First, e.Second)
}

func (e *BothFailed) Unwrap() []error { return []error{e.First, e.Second} }

// Run runs the race and returns once every attempt it started has
// returned, so their inputs may be reused afterwards. A panic in an
// attempt is its error, a *safe.PanicError, and ends the race: the other
// attempt is cancelled and the panic is the outcome even if the other
// succeeded, since a panic is a bug that another answer must not hide.
func (r Race[T]) Run(ctx context.Context) Outcome[T] {
	var o Outcome[T]
	start := time.Now()
	if r.Delay <= 0 || r.Second == nil {
		o.First = r.try(ctx, r.First, r.FirstOp)
		switch {
		case o.First.Err != nil && safe.IsPanic(o.First.Err):
			o.Panic = o.First.Err
			r.release(&o.First)
		case o.First.Err == nil:
			o.Won, o.Elapsed = First, time.Since(start)
		}
		return o
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		which Which
		try   Try[T]
	}
	results := make(chan result, 2)
	run := func(which Which, a Attempt[T], op string) {
		results <- result{which, r.try(ctx, a, op)}
	}
	go run(First, r.First, r.FirstOp)
	timer := time.NewTimer(r.Delay)
	defer timer.Stop()
	running := 1
	decided := false // a winner or a panic: the race only waits now
	for running > 0 {
		select {
		case <-timer.C:
			if decided || o.Second.Ran {
				continue
			}
			o.Second.Ran = true
			running++
			if r.h != nil {
				r.h.hedgeFired()
			}
			if r.OnSecond != nil {
				r.OnSecond()
			}
			go run(Second, r.Second, r.SecondOp)
		case res := <-results:
			running--
			if res.which == First {
				o.First = res.try
			} else {
				o.Second = res.try
			}
			switch err := res.try.Err; {
			case err != nil && safe.IsPanic(err):
				if o.Panic == nil {
					o.Panic, o.Won, o.Elapsed = err, None, 0
					decided = true
					cancel()
				}
			case err == nil && !decided:
				o.Won, o.Elapsed = res.which, time.Since(start)
				decided = true
				cancel()
			}
		}
	}
	switch {
	case o.Panic != nil:
		r.release(&o.First)
		r.release(&o.Second)
	case o.Won == First:
		r.release(&o.Second)
	case o.Won == Second:
		r.release(&o.First)
	}
	return o
}

// try runs one attempt, a panic in it being its error (op is formatted
// only then).
func (r Race[T]) try(ctx context.Context, a Attempt[T], op string) (t Try[T]) {
	t.Ran = true
	defer func() {
		if v := recover(); v != nil {
			var zero T
			t.Value, t.Err = zero, safe.Recovered(v, "%s", op)
		}
	}()
	t.Value, t.Err = a(ctx)
	return t
}

func (r Race[T]) release(t *Try[T]) {
	if !t.Ran {
		return
	}
	if r.Release != nil {
		r.Release(t.Value)
	}
	var zero T
	t.Value = zero
}

// Hedged runs r with h's adaptive delay for its size (none until h has
// samples) and keeps h's record: the winner's latency is a sample, a second attempt
// counts as hedged (h.OnHedge is called), and a second attempt that wins
// counts as won. r.Delay is h's to set.
func Hedged[T any](ctx context.Context, h *Hedger, r Race[T]) Outcome[T] {
	r.Delay, r.h = h.DelayFor(r.Bytes), h
	o := r.Run(ctx)
	if o.Won != None {
		h.observe(o.Elapsed, r.Bytes)
	}
	if o.Won == Second {
		h.mu.Lock()
		h.won++
		h.mu.Unlock()
	}
	return o
}
