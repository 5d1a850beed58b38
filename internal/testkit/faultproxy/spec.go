package faultproxy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// DefaultSpikeDelay is the latency of a spike when Spec.SpikeDelay is 0.
const DefaultSpikeDelay = 500 * time.Millisecond

// ErrSpec is wrapped by every error ParseSpec and Spec.Validate return.
var ErrSpec = errors.New("invalid fault spec")

// Spec says which faults the proxy injects and how often. Rates are
// per-request probabilities in [0, 1]. SlowDown, Internal, Reset and
// Truncate exclude one another (at most one per request; their sum is at
// most 1); a Spike is drawn independently and delays whatever follows. The
// zero Spec forwards everything untouched.
type Spec struct {
	// SlowDown answers the service's "slow down" (S3's 503 SlowDown,
	// Azure's 503 ServerBusy, GCS's 429 rateLimitExceeded) without
	// forwarding the request (its body is read first, as S3 does, so the
	// client sees the answer and not a broken pipe).
	SlowDown float64
	// Internal answers the service's server error (S3's 500
	// InternalError, Azure's 500 OperationTimedOut, GCS's 503
	// backendError) without forwarding.
	Internal float64
	// Reset reads a random part of the request body, then resets the
	// connection (SO_LINGER 0): the server never sees the request.
	Reset float64
	// Truncate forwards the request, then sends the response's headers
	// with the full Content-Length and only a random part of its body
	// before closing the connection. The server did act on the request.
	// A response without a body cannot be cut and is sent whole (and not
	// counted).
	Truncate float64
	// Spike delays a request by SpikeDelay (default 500 ms) before it is
	// handled.
	Spike      float64
	SpikeDelay time.Duration
	// Seed of the random source. Requests draw from it in the order they
	// arrive, so a seed fixes the fault sequence, not which concurrent
	// request gets which fault.
	Seed uint64
	// RateLimit admits this many requests per second (a token bucket of
	// Burst tokens) and answers the rest with the service's "slow down",
	// like S3 throttling a prefix. 0: no limit.
	RateLimit float64
	// Burst is the token bucket's size; 0 means 1 + RateLimit/10.
	Burst int
	// Stall holds one chosen request for a long time.
	Stall Stall
	// First, if set, is a fault the first request of every operation
	// gets, whatever the draws say (they are drawn all the same), so that
	// each operation a client sends meets it once however few requests it
	// makes: FaultSlowDown, FaultInternal, FaultReset or FaultTruncate. A
	// truncate lands on the operation's first answer with a body (HEAD
	// answers and empty ones cannot be cut). Ops limits it as it limits
	// the drawn faults.
	First Fault
	// Ops, if not empty, limits the drawn faults (SlowDown, Internal,
	// Reset, Truncate, Spike) to these operations (as Operation names
	// them), e.g. only CompleteMultipartUpload; other requests still draw from the random
	// source, so the sequence a seed gives does not depend on Ops.
	Ops []string
}

// Stall holds the Nth request (1-based) of operation Op for Delay, or
// until its client gives up or the proxy closes, then handles it normally.
// A zero Nth stalls nothing. A Part above 0 counts only requests whose
// partNumber is Part: part 1 of an object of several parts is never the
// object's last, which a streaming client may cut off and send again
// whole, ending the stall before any hedge would.
//
// Body moves the stall into a body: StallRequestBody holds the request
// after its headers, reading nothing of its body, so a client sending a
// body larger than the sockets' buffers blocks in mid-write;
// StallResponseBody forwards the request and sends the response's headers
// and half its body before holding.
type Stall struct {
	Op    string // operation, as Operation names it, e.g. "UploadPart", "PutBlock", "objects.insert"
	Nth   int
	Part  int
	Delay time.Duration
	Body  StallBody
}

// StallBody says where in a request a Stall holds it.
type StallBody string

// The places a stall holds a request: before it is handled (the zero
// value), in its body, or in its response's body.
const (
	StallRequestBody  StallBody = "request"
	StallResponseBody StallBody = "response"
)

// Validate checks every field and names the first one out of range.
func (s Spec) Validate() error {
	for _, r := range []struct {
		key string
		v   float64
	}{{"slowdown", s.SlowDown}, {"internal", s.Internal}, {"reset", s.Reset}, {"truncate", s.Truncate}, {"spike", s.Spike}} {
		if !(r.v >= 0 && r.v <= 1) { // also rejects NaN
			return fmt.Errorf("%w: %s must be a probability between 0 and 1, got %v", ErrSpec, r.key, r.v)
		}
	}
	if sum := s.SlowDown + s.Internal + s.Reset + s.Truncate; sum > 1+1e-9 {
		return fmt.Errorf("%w: slowdown+internal+reset+truncate must be at most 1, got %v", ErrSpec, sum)
	}
	if s.SpikeDelay < 0 {
		return fmt.Errorf("%w: spike delay must not be negative, got %v", ErrSpec, s.SpikeDelay)
	}
	if !(s.RateLimit >= 0) || math.IsInf(s.RateLimit, 0) {
		return fmt.Errorf("%w: rate must be 0 (no limit) or a positive number of requests per second, got %v", ErrSpec, s.RateLimit)
	}
	if s.Burst < 0 {
		return fmt.Errorf("%w: burst must be 0 (default) or positive, got %d", ErrSpec, s.Burst)
	}
	if s.Stall.Nth < 0 {
		return fmt.Errorf("%w: stall request number must be at least 1, got %d", ErrSpec, s.Stall.Nth)
	}
	for _, op := range s.Ops {
		if op == "" || strings.ContainsAny(op, ",+=") {
			return fmt.Errorf("%w: ops must name operations such as UploadPart or PutBlock, got %q", ErrSpec, op)
		}
	}
	switch s.First {
	case "", FaultSlowDown, FaultInternal, FaultReset, FaultTruncate:
	default:
		return fmt.Errorf("%w: first must be slowdown, internal, reset or truncate, got %q", ErrSpec, s.First)
	}
	if s.Stall.Nth > 0 && (s.Stall.Op == "" || s.Stall.Delay <= 0) {
		return fmt.Errorf("%w: stall needs an operation and a positive delay (stall=OP:N:DELAY), got %q:%d:%v", ErrSpec, s.Stall.Op, s.Stall.Nth, s.Stall.Delay)
	}
	return nil
}

// ParseSpec reads a fault spec: comma-separated key=value pairs, e.g.
//
//	slowdown=0.1,internal=0.02,reset=0.02,truncate=0.01,spike=0.01:500ms,seed=7
//
// Keys: slowdown, internal, reset, truncate, spike (probabilities; spike
// takes an optional :DELAY), seed (unsigned integer), rate (requests per
// second above which the proxy answers SlowDown), burst (token bucket
// size), stall=OP:N:DELAY (hold the Nth request of operation OP for
// DELAY), ops=OP+OP+... (inject the drawn faults into these operations
// only), first=FAULT (the first request of every operation gets FAULT). Keys may repeat; the last wins. The empty string is the zero
// Spec. The result is validated.
func ParseSpec(text string) (Spec, error) {
	var s Spec
	for item := range strings.SplitSeq(text, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		if !ok || val == "" {
			return Spec{}, fmt.Errorf("%w: %q is not key=value", ErrSpec, item)
		}
		var err error
		switch key {
		case "slowdown":
			s.SlowDown, err = parseRate(key, val)
		case "internal":
			s.Internal, err = parseRate(key, val)
		case "reset":
			s.Reset, err = parseRate(key, val)
		case "truncate":
			s.Truncate, err = parseRate(key, val)
		case "spike":
			rate, delay, hasDelay := strings.Cut(val, ":")
			if s.Spike, err = parseRate(key, rate); err == nil && hasDelay {
				s.SpikeDelay, err = parseDuration(key, delay)
			}
		case "seed":
			if s.Seed, err = strconv.ParseUint(val, 10, 64); err != nil {
				err = fmt.Errorf("%w: seed must be an unsigned integer, got %q", ErrSpec, val)
			}
		case "rate":
			if s.RateLimit, err = strconv.ParseFloat(val, 64); err != nil {
				err = fmt.Errorf("%w: rate must be requests per second, got %q", ErrSpec, val)
			}
		case "burst":
			if s.Burst, err = strconv.Atoi(val); err != nil {
				err = fmt.Errorf("%w: burst must be an integer, got %q", ErrSpec, val)
			}
		case "stall":
			s.Stall, err = parseStall(val)
		case "ops":
			s.Ops = strings.Split(val, "+")
		case "first":
			s.First = Fault(strings.ToLower(val))
		default:
			return Spec{}, fmt.Errorf("%w: unknown key %q (want slowdown, internal, reset, truncate, spike, seed, rate, burst, stall, ops or first)", ErrSpec, key)
		}
		if err != nil {
			return Spec{}, err
		}
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func parseRate(key, val string) (float64, error) {
	v, err := strconv.ParseFloat(val, 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return 0, fmt.Errorf("%w: %s must be a probability between 0 and 1, got %q", ErrSpec, key, val)
	}
	return v, nil
}

func parseDuration(key, val string) (time.Duration, error) {
	d, err := time.ParseDuration(val)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%w: %s delay must be a duration like 500ms, got %q", ErrSpec, key, val)
	}
	return d, nil
}

func parseStall(val string) (Stall, error) {
	parts := strings.Split(val, ":")
	if len(parts) != 3 {
		return Stall{}, fmt.Errorf("%w: stall must be OP:N:DELAY, e.g. UploadPart:5:30s, got %q", ErrSpec, val)
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 1 {
		return Stall{}, fmt.Errorf("%w: stall request number must be an integer of at least 1, got %q", ErrSpec, parts[1])
	}
	d, err := parseDuration("stall", parts[2])
	if err != nil {
		return Stall{}, err
	}
	return Stall{Op: parts[0], Nth: n, Delay: d}, nil
}

// String renders s in the form ParseSpec reads, omitting zero fields.
func (s Spec) String() string {
	var out []string
	add := func(key string, v float64) {
		if v != 0 {
			out = append(out, key+"="+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	add("slowdown", s.SlowDown)
	add("internal", s.Internal)
	add("reset", s.Reset)
	add("truncate", s.Truncate)
	if s.Spike != 0 {
		spike := "spike=" + strconv.FormatFloat(s.Spike, 'g', -1, 64)
		if s.SpikeDelay != 0 {
			spike += ":" + s.SpikeDelay.String()
		}
		out = append(out, spike)
	}
	add("rate", s.RateLimit)
	if s.Burst != 0 {
		out = append(out, "burst="+strconv.Itoa(s.Burst))
	}
	if s.Stall.Nth != 0 {
		out = append(out, fmt.Sprintf("stall=%s:%d:%v", s.Stall.Op, s.Stall.Nth, s.Stall.Delay))
	}
	if len(s.Ops) > 0 {
		out = append(out, "ops="+strings.Join(s.Ops, "+"))
	}
	if s.First != "" {
		out = append(out, "first="+string(s.First))
	}
	if s.Seed != 0 {
		out = append(out, "seed="+strconv.FormatUint(s.Seed, 10))
	}
	return strings.Join(out, ",")
}

// Only returns a Spec that injects f alone (FaultSlowDown, FaultInternal,
// FaultReset or FaultTruncate): on the first request of every operation
// (First), and on any other at rate, drawn from seed.
func Only(f Fault, rate float64, seed uint64) Spec {
	s := Spec{First: f, Seed: seed}
	switch f {
	case FaultSlowDown:
		s.SlowDown = rate
	case FaultInternal:
		s.Internal = rate
	case FaultReset:
		s.Reset = rate
	case FaultTruncate:
		s.Truncate = rate
	}
	return s
}
