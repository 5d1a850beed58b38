package reader_test

import (
	"fmt"
	"sync/atomic"

	"github.com/durashuffle/durashuffle/reader"
)

// sourceCounts is an Observer of a program's own: stored bytes by source
// and fallbacks by reason, every label present from the start so that a
// rate over them reads 0 rather than nothing.
type sourceCounts struct {
	served    map[string]*atomic.Int64
	fallbacks map[string]*atomic.Int64
}

func newSourceCounts() *sourceCounts {
	c := &sourceCounts{served: map[string]*atomic.Int64{}, fallbacks: map[string]*atomic.Int64{}}
	for _, s := range reader.ServedSources {
		c.served[s] = new(atomic.Int64)
	}
	for _, r := range reader.FallbackReasons {
		c.fallbacks[r] = new(atomic.Int64)
	}
	return c
}

func (c *sourceCounts) Served(source string, bytes int64) { c.served[source].Add(bytes) }
func (c *sourceCounts) Fallback(reason string)            { c.fallbacks[reason].Add(1) }

// A program counts where its readers' bytes came from by passing an
// Observer in Options; a frame that a fast source served with a bad
// checksum is read again from the object store and counted under
// FallbackChecksum.
func ExampleObserver() {
	counts := newSourceCounts()
	o := reader.Options{Observer: counts}
	// reader.Open(ctx, st, layout, query, stage, o) reads with it; here
	// the reader's calls are made by hand.
	o.Observer.Served(reader.SourceMemory, 1<<20)
	o.Observer.Fallback(reader.FallbackChecksum)
	o.Observer.Served(reader.SourceS3, 1<<20)
	fmt.Println("from s3:", counts.served[reader.SourceS3].Load(), "bytes;",
		"checksum fallbacks:", counts.fallbacks[reader.FallbackChecksum].Load())
	// Output: from s3: 1048576 bytes; checksum fallbacks: 1
}
