package manifest

import "testing"

// TestParse: one strict grammar for every key; anything else is foreign.
func TestParse(t *testing.T) {
	l := Layout{Prefix: "durashuffle"}
	for _, tc := range []struct {
		key  string
		want Key
	}{
		{"durashuffle/q1/stage-0/manifest.json", Key{Kind: KeyStageManifest, Query: "q1"}},
		{"durashuffle/q1/stage-12/worker-3/manifest.json", Key{Kind: KeyWorkerManifest, Query: "q1", Stage: 12, Worker: "3"}},
		{"durashuffle/q1/stage-2/index-20260101T000000-0011223344556677.bin", Key{Kind: KeyIndex, Query: "q1", Stage: 2}},
		{"durashuffle/q1/stage-2/index-.bin", Key{}},
		{"durashuffle/q1/stage-2/index-a/b.bin", Key{}},
		{"durashuffle/q1/stage-2/worker-w.1/attempt-20260101T000000-ab/data-0.arrows", Key{Kind: KeyData, Query: "q1", Stage: 2, Worker: "w.1", Attempt: "20260101T000000-ab"}},
		{"durashuffle/q1/stage-2/worker-1/attempt-a/data-17.arrows", Key{Kind: KeyData, Query: "q1", Stage: 2, Worker: "1", Attempt: "a"}},
		{"durashuffle/q1/stage-2/worker-1/attempt-a/data-0123456789abcdef-3.arrows", Key{Kind: KeyData, Query: "q1", Stage: 2, Worker: "1", Attempt: "a"}},
		{"durashuffle/~3/q1/stage-2/worker-1/attempt-a/data-0123456789abcdef-3.arrows", Key{Kind: KeyData, Query: "q1", Stage: 2, Worker: "1", Attempt: "a"}},
		{"durashuffle/~commit-guard/0123456789abcdef", Key{Kind: KeyGuardProbe}},
		{"durashuffle/~readyz/left-behind", Key{Kind: KeyReadyProbe}},
		{"durashuffle/~readyz/a/b", Key{Kind: KeyReadyProbe}},
		// Foreign: other prefixes, other shapes, invalid IDs.
		{"durashuffle-other/q1/stage-0/manifest.json", Key{}},
		{"other/durashuffle/q1/stage-0/manifest.json", Key{}},
		{"durashuffle/README", Key{}},
		{"durashuffle/q1/notes.txt", Key{}},
		{"durashuffle/q1/stage-x/manifest.json", Key{}},
		{"durashuffle/q1/stage-01/manifest.json", Key{}},
		{"durashuffle/q1/stage--1/manifest.json", Key{}},
		{"durashuffle/q1/stage-+1/manifest.json", Key{}},
		{"durashuffle/~3/q1/stage-2/manifest.json", Key{}},
		{"durashuffle/~3/~4/q1/stage-2/worker-1/attempt-a/data-0.arrows", Key{}},
		{"durashuffle/~commit-guard/0123", Key{}},
		{"durashuffle/~readyz/", Key{}},
		{"durashuffle/~readyzx/a", Key{}},
		{"other/~readyz/a", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0.arrows.tmp", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/other.bin", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-x.arrows", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0123456789ABCDEF-3.arrows", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0123456789abcde-3.arrows", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0123456789abcdef-03.arrows", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0123456789abcdef-.arrows", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-../data-0.arrows", Key{}},
		{"durashuffle/../stage-0/manifest.json", Key{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/sub/data-0.arrows", Key{}},
		{"durashuffle/q1/stage-0/worker-/manifest.json", Key{}},
		{"durashuffle/q1/stage-0/other/manifest.json", Key{}},
	} {
		got, ok := l.Parse(tc.key)
		if got != tc.want || ok != (tc.want.Kind != KeyForeign) {
			t.Errorf("Parse(%q) = %+v, %v, want %+v", tc.key, got, ok, tc.want)
		}
	}
	// An empty prefix still only matches the layout's shape.
	if got, _ := (Layout{}).Parse("q/stage-1/manifest.json"); got.Kind != KeyStageManifest || got.Stage != 1 {
		t.Errorf("empty prefix: %+v", got)
	}
	if got, ok := (Layout{}).Parse("photos/2024/cat.jpg"); ok || got.Kind != KeyForeign {
		t.Errorf("empty prefix, foreign key: %+v", got)
	}
}
