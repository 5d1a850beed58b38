package store

import (
	"maps"
	"math"
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

// Diff returns after minus before, per operation, dropping zeros: the
// requests of one phase.
func Diff(after, before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// putClassOps are the operations of a write path that S3 bills as
// PUT-class requests (its tier of PUT, COPY, POST and LIST): an object
// put, a multipart upload's create, each part and the complete. An abort
// is free. Azure's are Put Blob, Put Block and Put Block List (write
// operations in its billing); Google Cloud Storage's Class A writes are
// its JSON API's objects.insert (an object or a part object) and
// objects.compose (its deletes are free).
var putClassOps = []string{"PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
	"PutBlob", "PutBlock", "PutBlockList", "objects.insert", "objects.compose"}

// PutRequests is the PUT-class requests among ops (counts per operation,
// as Requests returns them): what storing the bytes costs in requests.
func PutRequests(ops map[string]int64) int64 {
	var n int64
	for _, op := range putClassOps {
		n += ops[op]
	}
	return n
}

// PerGiB is n per GiB of bytes (0 when bytes is 0), to two decimals.
func PerGiB(n, bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return math.Round(float64(n)/(float64(bytes)/(1<<30))*100) / 100
}
