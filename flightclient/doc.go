// Package flightclient is the Go client of the durashuffle sidecar's Arrow
// Flight protocol (docs/sidecar.md): put a worker's output and commit it,
// read partitions, describe, seal, release and delete stages, and fetch a
// peer's held bytes. Its request and result types are the protocol's JSON
// bodies, the same ones the sidecar decodes; failed calls return the
// sidecar's gRPC status, so callers branch on status.Code(err).
package flightclient
