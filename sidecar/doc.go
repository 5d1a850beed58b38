// Package sidecar serves durashuffle over Arrow Flight: query workers
// stream a stage's output in with DoPut and read partitions back with
// DoGet, next to /metrics, /healthz and /readyz on a plain HTTP port.
//
// The protocol (descriptors, app_metadata, tickets, actions and the gRPC
// codes of every failure) is documented in docs/sidecar.md; the JSON types
// of package flightclient (flightclient/protocol.go) are its definition.
package sidecar
