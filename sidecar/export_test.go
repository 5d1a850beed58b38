package sidecar

import (
	"net/http"
	"time"
)

// SetTestHook makes every handler call f at its hook points ("DoPut.batch"
// before each batch is written, "DoGet.batch" before each batch is sent,
// "DoAction" at the start), so a test can play a bug there: a panic, or a
// call that blocks. The returned func removes it.
func SetTestHook(f func(point string)) (restore func()) {
	testHook.Store(&f)
	return func() { testHook.Store(nil) }
}

// What the tests of package sidecar_test reach of the package's own.
var (
	AbortWait   = abortWait
	Reserve     = reserveFor
	ErrCutOff   = errCutOff
	ErrShutdown = errShutdown
	IsLoopback  = isLoopback
	LoadTLS     = loadTLS
)

// WithReadyInterval is o probing the bucket for /readyz every d.
func WithReadyInterval(o Options, d time.Duration) Options {
	o.readyInterval = d
	return o
}

// HTTPHandler serves /metrics, /healthz and /readyz.
func (s *Server) HTTPHandler() http.Handler { return s.httpHandler() }

// Ready is what /readyz answers.
func (s *Server) Ready() error { return s.checkReady() }
