package gc

import (
	"testing"

	"github.com/durashuffle/durashuffle/manifest"
)

func TestParseKey(t *testing.T) {
	l := manifest.Layout{Prefix: "durashuffle"}
	for _, tc := range []struct {
		key  string
		want keyInfo
	}{
		{"durashuffle/q1/stage-0/manifest.json", keyInfo{kind: stageManifest, query: "q1"}},
		{"durashuffle/q1/stage-12/worker-3/manifest.json", keyInfo{kind: workerManifest, query: "q1", stage: 12, worker: "3"}},
		{"durashuffle/q1/stage-2/index-20260101T000000-0011223344556677.bin", keyInfo{kind: indexObject, query: "q1", stage: 2}},
		{"durashuffle/q1/stage-2/index-.bin", keyInfo{}},
		{"durashuffle/q1/stage-2/index-a/b.bin", keyInfo{}},
		{"durashuffle/q1/stage-2/worker-w.1/attempt-20260101T000000-ab/data-0.arrows", keyInfo{kind: dataObject, query: "q1", stage: 2, worker: "w.1", attempt: "20260101T000000-ab"}},
		{"durashuffle/q1/stage-2/worker-1/attempt-a/data-17.arrows", keyInfo{kind: dataObject, query: "q1", stage: 2, worker: "1", attempt: "a"}},
		{"durashuffle/q1/stage-2/worker-1/attempt-a/data-0123456789abcdef-3.arrows", keyInfo{kind: dataObject, query: "q1", stage: 2, worker: "1", attempt: "a"}},
		// Foreign: other prefixes, other shapes, invalid IDs.
		{"durashuffle-other/q1/stage-0/manifest.json", keyInfo{}},
		{"other/durashuffle/q1/stage-0/manifest.json", keyInfo{}},
		{"durashuffle/README", keyInfo{}},
		{"durashuffle/q1/notes.txt", keyInfo{}},
		{"durashuffle/q1/stage-x/manifest.json", keyInfo{}},
		{"durashuffle/q1/stage-01/manifest.json", keyInfo{}},
		{"durashuffle/q1/stage--1/manifest.json", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0.arrows.tmp", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/other.bin", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-x.arrows", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0123456789ABCDEF-3.arrows", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0123456789abcde-3.arrows", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0123456789abcdef-03.arrows", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/data-0123456789abcdef-.arrows", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-../data-0.arrows", keyInfo{}},
		{"durashuffle/../stage-0/manifest.json", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-0/attempt-a/sub/data-0.arrows", keyInfo{}},
		{"durashuffle/q1/stage-0/worker-/manifest.json", keyInfo{}},
		{"durashuffle/q1/stage-0/other/manifest.json", keyInfo{}},
	} {
		if got := parseKey(l, tc.key); got != tc.want {
			t.Errorf("parseKey(%q) = %+v, want %+v", tc.key, got, tc.want)
		}
	}
	// An empty prefix still only matches the layout's shape.
	if got := parseKey(manifest.Layout{}, "q/stage-1/manifest.json"); got.kind != stageManifest || got.stage != 1 {
		t.Errorf("empty prefix: %+v", got)
	}
	if got := parseKey(manifest.Layout{}, "photos/2024/cat.jpg"); got.kind != foreignKey {
		t.Errorf("empty prefix, foreign key: %+v", got)
	}
}
