// Package reqs is the arithmetic of request counts (per operation, as
// store.Counter.Requests returns them) that the command line and the
// bench report: a phase's requests, the PUT-class among them, and a count
// per GiB.
package reqs

import "math"

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
