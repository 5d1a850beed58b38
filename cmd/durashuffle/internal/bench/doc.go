// Package bench is `durashuffle bench`: the write and read paths measured
// over a shaped link (toxiproxy in-process: latency and per-connection
// bandwidth, the link limit being concurrency x bandwidth) against the
// baselines a user would otherwise run, each contender in a child process
// so its peak RSS is its own.
//
// The parent process owns the endpoint (an in-memory S3 endpoint built for
// the bench, unless one is given; Azure's or GCS's with --store) and the
// link; a child runs exactly one
// contender (a Job) and reports a Result on stdout, its peak RSS (VmHWM)
// included. Scenarios alternate contenders over rounds and report medians.
package bench
