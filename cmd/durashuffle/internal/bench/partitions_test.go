package bench

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPartitionTargets checks the range read's targets on hand-made
// medians: at the narrowest and the wide count, for the grid's writer
// counts only, each ratio of stored bytes per second; a row without the
// downloads (a report from before them) has no target against them, and
// an unshaped link none against its limit.
func TestPartitionTargets(t *testing.T) {
	const mib = 1 << 20
	row := func(p, w int, ranges, tm, mgr float64) PartitionsRow {
		r := PartitionsRow{Partitions: p, Writers: w}
		r.Read.StoredBytesPerS, r.TM.StoredBytesPerS, r.Manager.StoredBytesPerS = ranges*mib, tm*mib, mgr*mib
		return r
	}
	rows := []PartitionsRow{
		row(64, 1, 60, 50, 40),
		row(64, 8, 50, 60, 50),
		row(512, 1, 10, 60, 60),  // neither the narrowest nor the wide count
		row(2048, 1, 56, 56, 0),  // no manager read
		row(2048, 4, 30, 60, 60), // the request budget's cell, not in the grid
		row(2048, 8, 64, 32, 64),
	}
	type want struct {
		got float64
		ok  bool
	}
	link := map[string]want{
		"1-writer, P=64: range read / link limit":    {0.938, true},
		"8-writers, P=64: range read / link limit":   {0.781, false},
		"1-writer, P=2048: range read / link limit":  {0.875, true},
		"8-writers, P=2048: range read / link limit": {1, true},
	}
	others := map[string]want{
		"1-writer, P=64: range read / transfermanager":    {1.2, true},
		"1-writer, P=64: range read / manager":            {1.5, true},
		"8-writers, P=64: range read / transfermanager":   {0.833, false},
		"8-writers, P=64: range read / manager":           {1, true},
		"1-writer, P=2048: range read / transfermanager":  {1, true},
		"8-writers, P=2048: range read / transfermanager": {2, true},
		"8-writers, P=2048: range read / manager":         {1, true},
	}
	shaped := maps.Clone(others)
	maps.Copy(shaped, link)
	for _, c := range []struct {
		limit float64
		want  map[string]want
	}{
		{64 * mib, shaped},
		{0, others},
	} {
		got := map[string]want{}
		for _, tg := range partitionTargets(rows, 2048, 8, c.limit) {
			if strings.Contains(tg.Name, ": range read / ") {
				got[tg.Name] = want{tg.Got, tg.OK}
			}
		}
		for name, w := range c.want {
			if g, ok := got[name]; !ok || g != w {
				t.Errorf("limit %.0f MiB/s: %q = %+v (present %v), want %+v", c.limit/mib, name, g, ok, w)
			}
		}
		for name := range got {
			if _, ok := c.want[name]; !ok {
				t.Errorf("limit %.0f MiB/s: unexpected target %q", c.limit/mib, name)
			}
		}
	}
}

// TestReadOrder: each round runs every reader once, and each reader goes
// first once in every three rounds.
func TestReadOrder(t *testing.T) {
	firsts := map[string]int{}
	for round := range 6 {
		o := readOrder(round)
		if got := slices.Sorted(slices.Values(o)); !slices.Equal(got, []string{DurashuffleRanges, Manager, TransferManager}) {
			t.Fatalf("round %d: %v", round, o)
		}
		firsts[o[0]]++
	}
	for _, name := range partitionReaders {
		if firsts[name] != 2 {
			t.Errorf("%s first in %d of 6 rounds, want 2", name, firsts[name])
		}
	}
	if o := readOrder(0); o[0] != DurashuffleRanges {
		t.Errorf("round 1 starts with %s, want the range read", o[0])
	}
}

// TestReplotOlderPartitions: a bench partitions report from before the
// transfermanager and manager reads still plots and prints, "-" where
// they would be, and its setup line does not claim them.
func TestReplotOlderPartitions(t *testing.T) {
	const older = `{"scenario": "partitions",
  "link": {"latency_ms": 20, "conn_bandwidth_bytes": 8388608, "connections": 8, "limit_bytes_per_s": 67108864},
  "results": null,
  "setup": {"rounds": 1, "rows": 1000, "write_rows": 8192, "producers": 2, "input": "fresh", "chunk_size": 8388608,
    "upload_concurrency": 8, "compression": "lz4", "store": "memory", "stored_per_logical": 0.5, "readers": 8},
  "partitions": [
    {"partitions": 64, "writers": 1,
     "write": {"name": "P=64 x 1-writer write", "seconds": 2, "stored_bytes": 134217728, "stored_bytes_per_s": 67108864, "logical_bytes_per_s": 134217728},
     "read": {"name": "P=64 x 1-writer read", "seconds": 4, "stored_bytes": 134217728, "stored_bytes_per_s": 33554432, "logical_bytes_per_s": 67108864}}
  ]}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "partitions.json"), []byte(older), 0o644); err != nil {
		t.Fatal(err)
	}
	reps, err := Replot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 {
		t.Fatalf("%d reports replotted, want 1", len(reps))
	}
	if _, err := os.Stat(filepath.Join(dir, "partitions.png")); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	PrintText(&text, reps[0])
	md := filepath.Join(dir, "B.md")
	if err := UpdateMarkdown(md, reps, dir); err != nil {
		t.Fatal(err)
	}
	mb, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	// The range read's 32 MiB/s, 0.50 of the 64 MiB/s link; no
	// transfermanager or manager.
	cells := regexp.MustCompile(`32\.0 / - / -[ |]+0\.50[ |]`)
	for what, s := range map[string]string{"text": text.String(), "markdown": string(mb)} {
		if !cells.MatchString(s) || strings.Contains(s, "transfermanager (tm)") {
			t.Errorf("%s:\n%s", what, s)
		}
	}
}
