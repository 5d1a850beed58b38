// Package leaktest checks that the goroutines a test started have exited:
// a call that failed, or a stream that was closed, must leave nothing
// running behind it.
package leaktest

import (
	"runtime"
	"testing"
	"time"
)

// Settled fails t, with every goroutine's stack, unless at most base
// goroutines (runtime.NumGoroutine before the test's work) run within
// two seconds: goroutines that have done their work may take a moment
// to return, ones blocked for good never do.
func Settled(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines running, %d before:\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		time.Sleep(5 * time.Millisecond)
	}
}
