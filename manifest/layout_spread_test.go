package manifest

import (
	"strings"
	"testing"
)

// TestSpreadKeys: DataKey spreads attempts over the shard prefixes, and
// checkObjectKey takes only keys a layout makes for the manifest's own
// query and stage: a hostile manifest cannot name another stage's data.
func TestSpreadKeys(t *testing.T) {
	l := Layout{Prefix: "p", Spread: 16}
	shards := map[string]bool{}
	for w := range 64 {
		k := l.DataKey("q", 2, string(rune('a'+w%26))+"x", "att", "00000000000000ab", 0)
		if !checkObjectKey("q", 2, k) {
			t.Fatalf("DataKey %q does not pass checkObjectKey", k)
		}
		shard, tail, ok := ParseSpread(k)
		if !ok || tail != "q/stage-2/"+DataName(string(rune('a'+w%26))+"x", "att", "00000000000000ab", 0) {
			t.Fatalf("DataKey %q: shard %q, tail %q", k, shard, tail)
		}
		shards[shard] = true
		if got := l.ObjectKey("q", 2, k); got != "p/"+k {
			t.Fatalf("ObjectKey(%q) = %q", k, got)
		}
	}
	if len(shards) < 10 {
		t.Fatalf("64 attempts in %d of 16 shards", len(shards))
	}
	if k := (Layout{Prefix: "p"}).DataKey("q", 2, "w", "a", "00000000000000ab", 1); k != DataName("w", "a", "00000000000000ab", 1) {
		t.Fatalf("without Spread: %q", k)
	}
	// A combined level's objects spread too (package combine).
	if k := l.spreadName("q", 2, "combine-0123456789abcdef/task-3", "combine-0123456789abcdef/task-3/data-00000000000000ab.arrows"); !checkObjectKey("q", 2, k) || !strings.HasPrefix(k, "~") {
		t.Errorf("spread combined object %q: checkObjectKey refuses it", k)
	}
	for _, bad := range []string{"", "~1/q/stage-2/combined.json", "~1/q/stage-3/combine-0123456789abcdef/task-0/data-00000000000000ab.arrows", "~/q/stage-2/worker-w/attempt-a/data-0.arrows", "~zz/q/stage-2/worker-w/x",
		"~1/other/stage-2/worker-w/attempt-a/data-0.arrows", "~1/q/stage-3/worker-w/attempt-a/data-0.arrows",
		"~1/q/stage-2/manifest.json", "~1/q/stage-2/worker-w/~2/x", "worker-w/../../x"} {
		if checkObjectKey("q", 2, bad) {
			t.Errorf("checkObjectKey accepted %q", bad)
		}
	}
}
