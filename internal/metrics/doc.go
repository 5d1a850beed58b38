// Package metrics is durashuffle's Prometheus instrumentation: the upload
// pool's queue, buffers and part timings, bytes moved, and request and
// retry counts, on a registry of its own. Its methods are the observers
// of the upload pool, the memory store and the reader (durashuffle.Observer
// among them) and it wraps a store to count the bytes read back. It
// imports only store: the root package's wiring asserts that it
// implements those observers, and its tests that the label values it
// starts at 0 (ServedSources, FallbackReasons, CommitGuardStates) are
// those of the reader and of the commit guard.
package metrics
