// Package safe contains panics in the goroutines the library starts on a
// call's behalf: a panic there becomes a *PanicError that the call
// returns, so a bug or a hostile input fails that call alone and the
// process serves the next one.
package safe

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

// PanicError is a recovered panic, returned as the error of the call it
// ran for. It does not unwrap to the panic's value: a panic is a bug, and
// an error passed to panic must not make the call look retryable, not
// found or cancelled. Error is one line, naming where the panic happened;
// Stack is the whole goroutine's stack, for a log.
type PanicError struct {
	Op    string // what panicked: "decode of the frame of partition 3 at offset 0 of t/q1/..."
	Value any    // what was passed to panic
	At    string // the function and file:line that panicked, "" if not found
	Stack []byte
}

func (e *PanicError) Error() string {
	if e.At == "" {
		return fmt.Sprintf("panic in %s: %v", e.Op, e.Value)
	}
	return fmt.Sprintf("panic in %s: %v (at %s)", e.Op, e.Value, e.At)
}

// Recovered returns the PanicError of v, a value recover returned while
// running the operation that format and args describe (formatted only
// here, so naming it costs nothing until something panics). Call it in
// the deferred function that recovered: the stack is then still the
// panicking goroutine's, down to the panic.
func Recovered(v any, format string, args ...any) *PanicError {
	return &PanicError{Op: fmt.Sprintf(format, args...), Value: v, At: panicSite(), Stack: debug.Stack()}
}

// Recover, deferred, turns a panic of the function that deferred it into
// *errp (the function's named error result), a *PanicError. It must be
// deferred itself (defer safe.Recover(&err, ...)): recover only stops a
// panic when called by the deferred function.
func Recover(errp *error, format string, args ...any) {
	if v := recover(); v != nil {
		*errp = Recovered(v, format, args...)
	}
}

// Call runs fn and returns its error, or a *PanicError if it panics.
func Call(fn func() error, format string, args ...any) (err error) {
	defer Recover(&err, format, args...)
	return fn()
}

// IsPanic reports whether err is or wraps a *PanicError.
func IsPanic(err error) bool {
	var pe *PanicError
	return errors.As(err, &pe)
}

// panicSite finds the frame that panicked on the current (panicking)
// goroutine: the first one outside the runtime below runtime.gopanic.
// Functions are named by their package's last path element, files by
// their base name: "reader.readSpan.func1 (fetch.go:249)".
func panicSite() string {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	below := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			below = true
		case below && !strings.HasPrefix(f.Function, "runtime."):
			fn := f.Function
			if i := strings.LastIndexByte(fn, '/'); i >= 0 {
				fn = fn[i+1:]
			}
			return fmt.Sprintf("%s (%s:%d)", fn, filepath.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}
