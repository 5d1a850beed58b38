//go:build bench

package main

import (
	"strings"
	"testing"
)

// --chunk-sizes is checked by chunk_size's own rule (S3's part sizes),
// before anything runs: a usage error naming the size and the range.
func TestBenchChunkSizesOutsidePartSizes(t *testing.T) {
	for _, c := range []struct{ flag, bad string }{{"1MiB", "1MiB"}, {"5MiB,6GiB", "6GiB"}} {
		stdout, stderr, code := runHere(t, "bench", "sweep", "--chunk-sizes", c.flag)
		want := "--chunk-sizes " + c.bad + ": invalid configuration: chunk_size must be between 5MiB and 5GiB, got " + c.bad
		if code != exitUsage || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("bench sweep --chunk-sizes %s: exit %d, stdout %q, stderr %q; want exit %d and %q", c.flag, code, stdout, stderr, exitUsage, want)
		}
	}
}
