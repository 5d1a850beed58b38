// Package docstest holds tests that keep the documentation true to the
// code, one file each:
//   - metrics_test.go: the metrics table of docs/metrics.md against
//     what internal/metrics exports;
//   - combinecost_test.go: docs/combining.md's table of what combining
//     costs per TiB against combine's plans;
//   - interop_test.go: the byte-range recipe of docs/interop.md against a
//     stage written by the library;
//   - sidecar_test.go: the Go client of docs/sidecar.md against a running
//     sidecar;
//   - readme_test.go: the README's library snippet is the text of the root
//     package's Example, which compiles and runs against the embedded
//     server as its Output says;
//   - compose_test.go: localstack/docker-compose.yml as far as it can be
//     checked without Docker;
//   - outside_test.go: examples/engine, a module of its own, builds and
//     runs against the library as an outside program would;
//   - paths_test.go: every repository path and package the README,
//     BENCHMARKS.md and docs/*.md name exists, docs/format.md's title
//     states the format version the code writes, and no file refers to
//     anything outside the repository (a folder beside it, a tracker's
//     issue number, the circumstances of its writing);
//   - anchors_test.go: every link to a heading of these pages names a
//     heading the page has;
//   - length_test.go: BENCHMARKS.md is at most 450 lines and each
//     docs/*.md page at most 600.
package docstest
