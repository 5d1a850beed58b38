// Package metrics is durashuffle's Prometheus instrumentation: the upload
// pool's queue, buffers and part timings, bytes moved, and request and
// retry counts, on a registry of its own. It implements
// durashuffle.Observer (the uploader's Observer) and wraps a store to
// count the bytes read back.
package metrics
