package sidecar

import (
	"context"
	"fmt"
	"testing"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// TestStageCacheBoundedInBytes: the cache holds stages up to its bound
// in bytes (manifest plus loaded summaries), least recently used out, and
// never a stage larger than the bound.
func TestStageCacheBoundedInBytes(t *testing.T) {
	l := manifest.Layout{Prefix: "t"}
	st := &store.Mem{}
	stage := func(n, workers, partitions int) *reader.Stage {
		m := &manifest.Stage{Query: "q", Stage: n, Partitions: partitions, Sealed: true}
		for w := range workers {
			m.Workers = append(m.Workers, manifest.Worker{Worker: fmt.Sprint(w), Objects: []manifest.Object{{Key: "k", Size: 1}}})
		}
		return reader.FromManifest(st, l, m, reader.Options{})
	}
	one := stage(0, 10, 4).Manifest().MemSize()
	c := &stageCache{max: 3*one + one/2}
	for n := range 5 {
		c.put(stageKey{"q", n, ""}, stage(n, 10, 4), 0)
	}
	if stages, bytes := c.size(); stages != 3 || bytes > c.max {
		t.Fatalf("%d stages of %d bytes cached, bound %d", stages, bytes, c.max)
	}
	for n, want := range []bool{false, false, true, true, true} {
		if got := c.get(stageKey{"q", n, ""}) != nil; got != want {
			t.Fatalf("stage %d cached %v, want %v", n, got, want)
		}
	}
	// A loaded summary counts: 1,000 partitions of 32 bytes push the
	// least recent stage out.
	big := stage(9, 10, 1000)
	c.put(stageKey{"q", 9, ""}, big, 0)
	if _, err := c.summary(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if stages, bytes := c.size(); bytes > c.max || stages > 2 {
		t.Fatalf("after a summary: %d stages of %d bytes, bound %d", stages, bytes, c.max)
	}
	// A stage larger than the bound is never cached.
	c.put(stageKey{"q", 10, ""}, stage(10, 1000, 4), 0)
	if c.get(stageKey{"q", 10, ""}) != nil {
		t.Fatal("a stage larger than the bound was cached")
	}
}
