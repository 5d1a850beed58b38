// Package faultproxy is an HTTP proxy between an object store client and
// its server (S3, Azure Blob Storage or Google Cloud Storage's JSON API,
// told apart by each request) that injects, from a seeded random source,
// the failures object stores really produce, in each service's own words:
// "slow down" (503 SlowDown, 503 ServerBusy, 429 rateLimitExceeded), server
// errors (500 InternalError, 500 OperationTimedOut, 503 backendError),
// connections reset while a body is in flight, response bodies cut short,
// latency spikes, a rate limit answered with "slow down", and one chosen
// request stalled.
//
// It is a test helper (the fault matrix, adaptive concurrency and hedging
// tests put it between the SDK and MinIO) and the engine of
// `durashuffle bench --faults SPEC`; ParseSpec reads that SPEC.
package faultproxy
