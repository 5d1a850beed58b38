// Package bench is `durashuffle bench`: the write and read paths measured
// over a shaped link (toxiproxy in-process: latency and per-connection
// bandwidth, the link limit being concurrency x bandwidth) against the
// baselines a user would otherwise run, each contender in a child process
// so its peak RSS is its own.
//
// The parent process owns the endpoint (the embedded S3 server unless one
// is given) and the link; a child runs exactly one contender (a Job) and
// reports a Result on stdout; the parent reads the child's maximum RSS from
// its rusage. Scenarios alternate contenders over rounds and report medians.
package bench
