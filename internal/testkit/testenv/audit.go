package testenv

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"

	"github.com/durashuffle/durashuffle/internal/retry"
)

// RetryAudit is an http.RoundTripper for a client's S3 store that counts
// the requests it carries by S3 operation, apart from those sent outside
// an attempt of the retry layer (retry.InAttempt false on the request's
// context): a request sent around the layer fails for good on the first
// reset. Safe for concurrent use.
type RetryAudit struct {
	next    http.RoundTripper
	mu      sync.Mutex
	through map[string]int64 // requests inside an attempt, by operation
	around  map[string]int64 // requests outside any attempt, by operation
}

// NewRetryAudit returns an audit that sends requests on through next.
func NewRetryAudit(next http.RoundTripper) *RetryAudit {
	return &RetryAudit{next: next, through: map[string]int64{}, around: map[string]int64{}}
}

// Client is an HTTP client whose requests the audit sees, for
// durashuffle.WithHTTPClient.
func (a *RetryAudit) Client() *http.Client { return &http.Client{Transport: a} }

// RoundTrip implements http.RoundTripper.
func (a *RetryAudit) RoundTrip(r *http.Request) (*http.Response, error) {
	// The SDK names the operation in the context it sends the request
	// with; a request of another client is named by method and path.
	op := awsmiddleware.GetOperationName(r.Context())
	if op == "" {
		op = r.Method + " " + r.URL.Path
	}
	a.mu.Lock()
	if retry.InAttempt(r.Context()) {
		a.through[op]++
	} else {
		a.around[op]++
	}
	a.mu.Unlock()
	return a.next.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the transport
// below, when it has them (an http.Transport).
func (a *RetryAudit) CloseIdleConnections() {
	if c, ok := a.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Counts returns the requests seen inside attempts of the retry layer and
// those seen outside any, by operation.
func (a *RetryAudit) Counts() (through, around map[string]int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.through), maps.Clone(a.around)
}

// Reset forgets the requests seen so far.
func (a *RetryAudit) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.through)
	clear(a.around)
}

// Check fails t if a request went around the retry layer, or if none of
// the operations want (each at least once) went through it: an audit
// that saw nothing proves nothing.
func (a *RetryAudit) Check(t testing.TB, what string, want ...string) {
	t.Helper()
	through, around := a.Counts()
	if len(around) > 0 {
		t.Errorf("%s: requests sent around the retry layer: %s (through it: %s)", what, FormatCounts(around), FormatCounts(through))
	}
	if len(through) == 0 {
		t.Errorf("%s: no request went through the retry layer", what)
	}
	for _, op := range want {
		if through[op] == 0 {
			t.Errorf("%s: no %s through the retry layer (saw %s)", what, op, FormatCounts(through))
		}
	}
}

// FormatCounts renders counts by name as "GetObject 3, ListObjectsV2 1",
// in name order; "none" when empty.
func FormatCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// EnvSoakRuns sets how many seeded runs a fault matrix makes (make soak
// sets 20).
const EnvSoakRuns = "DURASHUFFLE_SOAK_RUNS"

// SoakRuns returns the runs EnvSoakRuns asks for, else def; a value that
// is not a positive number fails t.
func SoakRuns(t testing.TB, def int) int {
	t.Helper()
	v := os.Getenv(EnvSoakRuns)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of runs", EnvSoakRuns, v)
	}
	return n
}
