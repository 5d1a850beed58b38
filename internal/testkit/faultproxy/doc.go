// Package faultproxy is an HTTP proxy between an S3 client and an S3 server
// that injects, from a seeded random source, the failures object stores
// really produce: 503 SlowDown, 500 InternalError, connections reset while
// a body is in flight, response bodies cut short, latency spikes, a rate
// limit answered with SlowDown, and one chosen request stalled.
//
// It is a test helper (the fault matrix, adaptive concurrency and hedging
// tests put it between the SDK and MinIO) and the engine of
// `durashuffle bench --faults SPEC`; ParseSpec reads that SPEC.
package faultproxy
