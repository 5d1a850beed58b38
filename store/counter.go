package store

import (
	"maps"
	"sync"
)

// Counter counts requests per operation (as the SDK names them: PutObject,
// UploadPart, GetObject, ...) and retries per operation and reason. The S3
// client's middleware records every HTTP request it sends; the retry layer
// records every retry. Safe for concurrent use; the zero value is ready.
type Counter struct {
	mu       sync.Mutex
	requests map[string]int64
	statuses map[OpStatus]int64
	retries  map[OpReason]int64
}

// OpStatus keys request counts by operation and HTTP status (0: no response).
type OpStatus struct {
	Op     string
	Status int
}

// OpReason keys retry counts by operation and the reason retried.
type OpReason struct {
	Op     string
	Reason string
}

// Request records one request of op that ended with HTTP status (0 if no
// response arrived).
func (c *Counter) Request(op string, status int) {
	c.mu.Lock()
	if c.requests == nil {
		c.requests = map[string]int64{}
		c.statuses = map[OpStatus]int64{}
	}
	c.requests[op]++
	c.statuses[OpStatus{op, status}]++
	c.mu.Unlock()
}

// Retry records one retry of op for reason (e.g. "SlowDown", "reset").
func (c *Counter) Retry(op, reason string) {
	c.mu.Lock()
	if c.retries == nil {
		c.retries = map[OpReason]int64{}
	}
	c.retries[OpReason{op, reason}]++
	c.mu.Unlock()
}

// Requests returns a copy of the per-operation request counts.
func (c *Counter) Requests() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := maps.Clone(c.requests)
	if out == nil {
		out = map[string]int64{}
	}
	return out
}

// Statuses returns a copy of the request counts per operation and status.
func (c *Counter) Statuses() map[OpStatus]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.statuses)
}

// Retries returns a copy of the retry counts per operation and reason.
func (c *Counter) Retries() map[OpReason]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.retries)
}

// Total is the number of requests recorded.
func (c *Counter) Total() int64 {
	var n int64
	for _, v := range c.Requests() {
		n += v
	}
	return n
}
