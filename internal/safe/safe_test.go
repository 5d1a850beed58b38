package safe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

//go:noinline
func explode(v any) { panic(v) }

type node struct{ next *node }

//go:noinline
func deref(n *node) *node { return n.next }

func TestCallTurnsAPanicIntoItsError(t *testing.T) {
	err := Call(func() error { explode("a bug"); return nil }, "decode of frame %d of %s", 3, "k")
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Call: %v, want a *PanicError", err)
	}
	if pe.Op != "decode of frame 3 of k" || pe.Value != "a bug" || len(pe.Stack) == 0 {
		t.Fatalf("PanicError %+v: want the op, the value and a stack", pe)
	}
	// The site is the function that called panic, not the runtime's or
	// this package's frames.
	if !strings.HasPrefix(pe.At, "safe.explode (safe_test.go:") {
		t.Fatalf("At = %q, want safe.explode in safe_test.go", pe.At)
	}
	if want := "panic in decode of frame 3 of k: a bug (at safe.explode (safe_test.go:"; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Error() = %q, want one line starting %q", err, want)
	}
	if !strings.Contains(string(pe.Stack), "safe.explode") {
		t.Fatalf("stack does not name the panicking function:\n%s", pe.Stack)
	}
}

func TestRuntimePanicsNameTheirSite(t *testing.T) {
	err := Call(func() error { deref(nil); return nil }, "walk")
	var pe *PanicError
	if !errors.As(err, &pe) || !strings.HasPrefix(pe.At, "safe.deref (safe_test.go:") {
		t.Fatalf("nil dereference: %v, want its site in safe.deref", err)
	}
	var idx []int
	err = Call(func() error { _ = idx[len(idx)+2]; return nil }, "index")
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "index out of range") || !strings.Contains(pe.At, "safe_test.go:") {
		t.Fatalf("index out of range: %v, want the runtime error and its site here", err)
	}
}

func TestCallPassesErrorsAndNilThrough(t *testing.T) {
	plain := errors.New("plain")
	if err := Call(func() error { return plain }, "op"); err != plain {
		t.Fatalf("Call = %v, want the function's own error", err)
	}
	if err := Call(func() error { return nil }, "op"); err != nil {
		t.Fatalf("Call = %v, want nil", err)
	}
	// panic(nil) is a panic too (a *runtime.PanicNilError since Go 1.21).
	if err := Call(func() error { panic(nil) }, "op"); !IsPanic(err) {
		t.Fatalf("panic(nil): %v, want a *PanicError", err)
	}
}

// An error passed to panic is the panic's value, not the PanicError's
// cause: a panic never classifies as cancelled, not found or retryable.
func TestPanicErrorDoesNotUnwrapItsValue(t *testing.T) {
	err := Call(func() error { panic(context.Canceled) }, "op")
	if errors.Is(err, context.Canceled) {
		t.Fatalf("%v unwraps to context.Canceled", err)
	}
	wrapped := fmt.Errorf("upload part 2 of k: %w", err)
	if !IsPanic(wrapped) || IsPanic(context.Canceled) || IsPanic(nil) {
		t.Fatal("IsPanic does not see a wrapped PanicError, or sees one where there is none")
	}
}
