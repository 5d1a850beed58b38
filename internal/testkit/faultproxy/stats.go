package faultproxy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Fault is a kind of failure the proxy injects.
type Fault string

// The faults, as Stats reports them.
const (
	FaultSlowDown Fault = "slowdown" // the service's "slow down": 503 SlowDown, 503 ServerBusy, 429 rateLimitExceeded
	FaultInternal Fault = "internal" // its server error: 500 InternalError, 500 OperationTimedOut, 503 backendError
	FaultReset    Fault = "reset"    // connection reset while the request body was in flight
	FaultTruncate Fault = "truncate" // response body cut short
	FaultSpike    Fault = "spike"    // request delayed by Spec.SpikeDelay
	FaultThrottle Fault = "throttle" // the service's "slow down" because the rate limit was exceeded
	FaultStall    Fault = "stall"    // the one chosen request held back
)

// Faults lists every Fault in the order reports use.
var Faults = []Fault{FaultSlowDown, FaultInternal, FaultReset, FaultTruncate, FaultSpike, FaultThrottle, FaultStall}

// Injection keys fault counts by operation and fault.
type Injection struct {
	Op    string
	Fault Fault
}

// Stats is a snapshot of what the proxy saw and did.
type Stats struct {
	// Requests received, by operation (see Operation).
	Requests map[string]int64
	// Injected faults by operation and fault. A spike on a request that
	// then also failed counts under both.
	Injected map[Injection]int64
}

// ByFault sums Injected per fault.
func (s Stats) ByFault() map[Fault]int64 {
	out := map[Fault]int64{}
	for k, n := range s.Injected {
		out[k.Fault] += n
	}
	return out
}

// ByOp sums Injected per operation.
func (s Stats) ByOp() map[string]int64 {
	out := map[string]int64{}
	for k, n := range s.Injected {
		out[k.Op] += n
	}
	return out
}

// Total is the number of faults injected.
func (s Stats) Total() int64 {
	var n int64
	for _, v := range s.Injected {
		n += v
	}
	return n
}

// TotalRequests is the number of requests received.
func (s Stats) TotalRequests() int64 {
	var n int64
	for _, v := range s.Requests {
		n += v
	}
	return n
}

// Add returns s plus o, for totals over several runs.
func (s Stats) Add(o Stats) Stats {
	out := Stats{Requests: maps.Clone(s.Requests), Injected: maps.Clone(s.Injected)}
	if out.Requests == nil {
		out.Requests = map[string]int64{}
	}
	if out.Injected == nil {
		out.Injected = map[Injection]int64{}
	}
	for k, v := range o.Requests {
		out.Requests[k] += v
	}
	for k, v := range o.Injected {
		out.Injected[k] += v
	}
	return out
}

// String is a one-line summary: "requests N; faults M: slowdown 5
// (UploadPart 3, GetObject 2), reset 1 (UploadPart 1)".
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests %d; faults %d", s.TotalRequests(), s.Total())
	sep := ": "
	for _, f := range Faults {
		var ops []Injection
		var n int64
		for k, v := range s.Injected {
			if k.Fault == f && v > 0 {
				ops = append(ops, k)
				n += v
			}
		}
		if n == 0 {
			continue
		}
		slices.SortFunc(ops, func(a, b Injection) int {
			return cmp.Or(cmp.Compare(s.Injected[b], s.Injected[a]), cmp.Compare(a.Op, b.Op))
		})
		parts := make([]string, len(ops))
		for i, k := range ops {
			parts[i] = fmt.Sprintf("%s %d", k.Op, s.Injected[k])
		}
		fmt.Fprintf(&b, "%s%s %d (%s)", sep, f, n, strings.Join(parts, ", "))
		sep = ", "
	}
	return b.String()
}
