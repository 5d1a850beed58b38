// Package docstest holds tests that keep the operator documentation true
// to the code: the metrics table of docs/operations.md against what
// internal/engine/metrics exports, the byte-range recipe of docs/interop.md
// against a stage written by the library, and the Go client of
// docs/sidecar.md against a running sidecar.
package docstest
