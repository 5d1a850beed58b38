package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/gc"
)

// TestCombineCLI: on every backend, combine --plan predicts and changes
// nothing; --task runs one task (again: a no-op); --seal with tasks
// missing is refused naming them; combine without --task runs the rest
// and seals, and read then returns the same rows in the same order,
// from the combined objects.
func TestCombineCLI(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			tg := newTarget(t, b)
			for w := range 4 {
				in := arrowStream(t, testBatches(t, w*1000, w*1000+1000, 100))
				tg.run(t, in, "write", "-q", "q", "-w", fmt.Sprint(w), "--partitions", "6", "--partition-by", "id").must(t)
			}
			tg.run(t, nil, "seal", "-q", "q", "--workers", "4").must(t)
			before := tg.run(t, nil, "read", "-q", "q", "--partitions", "0-5", "--format", "jsonl").must(t).stdout
			if n := len(jsonLinesOf(t, before)); n != 4000 {
				t.Fatalf("read %d rows before combining, want 4000", n)
			}

			var plan combineSummary
			tg.run(t, nil, "combine", "-q", "q", "--groups", "2", "--buckets", "3", "--plan", "--json").must(t).decode(t, &plan)
			p := plan.Plan
			if p == nil || p.Tasks() != 6 || p.Objects != 4 || p.Readers != 6 || plan.Sealed || plan.Combined {
				t.Fatalf("plan: %+v", plan)
			}
			// 6 readers x (manifest, index, 4 writer objects) as written;
			// 6 x (2 + 2 groups) combined.
			if p.Predict.Direct.GET != 36 || p.Predict.Combined.GET != 24 {
				t.Errorf("predicted %d GETs direct and %d combined, want 36 and 24", p.Predict.Direct.GET, p.Predict.Combined.GET)
			}
			text := tg.run(t, nil, "combine", "-q", "q", "--groups", "2", "--buckets", "3", "--plan").must(t).stdout
			if !strings.Contains(text, "6 tasks = 2 groups x 3 buckets over 4 writer objects, 6 partitions") || !strings.Contains(text, "direct:   readers 36 GETs") {
				t.Errorf("plan output:\n%s", text)
			}

			var one combineSummary
			tg.run(t, nil, "combine", "-q", "q", "--groups", "2", "--buckets", "3", "--task", "4", "--json").must(t).decode(t, &one)
			if len(one.Tasks) != 1 || !one.Tasks[0].Wrote || one.Tasks[0].Task != 4 || one.Tasks[0].Worker != "c4" || one.Tasks[0].Rows == 0 {
				t.Fatalf("task 4: %+v", one.Tasks)
			}
			again := tg.run(t, nil, "combine", "-q", "q", "--groups", "2", "--buckets", "3", "--task", "4").must(t).stdout
			if !strings.Contains(again, "task 4 (c4) already committed") {
				t.Errorf("second run of task 4:\n%s", again)
			}
			r := tg.run(t, nil, "combine", "-q", "q", "--groups", "2", "--buckets", "3", "--seal")
			if r.code == 0 || !strings.Contains(r.stderr, "5 of 6 tasks have no manifest") || !strings.Contains(r.stderr, "task 5 (group 1, bucket 2") {
				t.Fatalf("seal with tasks missing: exit %d\n%s", r.code, r.stderr)
			}
			if r := tg.run(t, nil, "combine", "-q", "q", "--groups", "2", "--buckets", "3", "--task", "6"); r.code == 0 || !strings.Contains(r.stderr, "task 6 outside the plan's 6 tasks [0, 6)") {
				t.Fatalf("task 6 of 6: exit %d\n%s", r.code, r.stderr)
			}
			if r := tg.run(t, nil, "combine", "-q", "q", "--part-bytes", "4MiB", "--plan"); r.code != 2 || !strings.Contains(r.stderr, "--part-bytes must be from 5242880 bytes (5MiB) to 5368709120 bytes (5GiB), got 4194304") {
				t.Fatalf("--part-bytes 4MiB: exit %d\n%s", r.code, r.stderr)
			}

			var all combineSummary
			tg.run(t, nil, "combine", "-q", "q", "--groups", "2", "--buckets", "3", "--parallel", "2", "--json").must(t).decode(t, &all)
			wrote := 0
			for _, tk := range all.Tasks {
				if tk.Wrote {
					wrote++
				}
			}
			if len(all.Tasks) != 6 || wrote != 5 || !all.Sealed || !all.Combined {
				t.Fatalf("combine: %d tasks, %d written, sealed %v, combined %v", len(all.Tasks), wrote, all.Sealed, all.Combined)
			}
			after := tg.run(t, nil, "read", "-q", "q", "--partitions", "0-5", "--format", "jsonl").must(t).stdout
			if after != before {
				t.Errorf("read after combining differs: %d bytes, %d before", len(after), len(before))
			}
			var info struct {
				Workers []struct {
					Worker string `json:"worker"`
				} `json:"workers"`
			}
			tg.run(t, nil, "inspect", "-q", "q", "--json").must(t).decode(t, &info)
			if len(info.Workers) != 6 || info.Workers[0].Worker != "c0" {
				t.Errorf("inspect after combining: %+v", info.Workers)
			}
			// The first level's seal run again (an engine retrying it)
			// answers with the combined stage and writes nothing; other
			// workers are refused.
			resealed := tg.run(t, nil, "seal", "-q", "q", "--workers", "4").must(t).stdout
			if !strings.Contains(resealed, "sealed q stage 0, combined from 4 workers: 6 tasks, 6 partitions, 4000 rows") {
				t.Errorf("seal again after combining:\n%s", resealed)
			}
			if r := tg.run(t, nil, "seal", "-q", "q", "--workers", "3"); r.code == 0 || !strings.Contains(r.stderr, "combined from 4 workers") {
				t.Errorf("seal of 3 workers after combining: exit %d\n%s", r.code, r.stderr)
			}
			// gc with a grace for the first level removes the writers'
			// objects and manifests; the stage reads on, combined.
			var rep gc.Report
			tg.run(t, nil, "gc", "--older-than", "1h", "--combined-grace", "1ns", "--json").must(t).decode(t, &rep)
			// 4 worker manifests, 4 data objects, the first level's index.
			if rep.Totals.ObjectsDeleted != 9 {
				t.Errorf("gc of the first level deleted %d objects, want 9: %+v", rep.Totals.ObjectsDeleted, rep.Orphans)
			}
			if got := tg.run(t, nil, "read", "-q", "q", "--partitions", "0-5", "--format", "jsonl").must(t).stdout; got != before {
				t.Errorf("read after gc of the first level differs: %d bytes, %d before", len(got), len(before))
			}
			// With the worker manifests gone, the workers' IDs still match.
			if got := tg.run(t, nil, "seal", "-q", "q", "--workers", "4").must(t).stdout; got != resealed {
				t.Errorf("seal again after gc of the first level:\n%s\nwas:\n%s", got, resealed)
			}
			if got := tg.run(t, nil, "read", "-q", "q", "--partitions", "0-5", "--format", "jsonl").must(t).stdout; got != before {
				t.Errorf("read after sealing again differs: %d bytes, %d before", len(got), len(before))
			}
			// Combining a combined stage changes nothing.
			out := tg.run(t, nil, "combine", "-q", "q").must(t).stdout
			if !strings.Contains(out, "combined q stage 0: 6 tasks, 4000 rows") {
				t.Errorf("combine of a combined stage:\n%s", out)
			}
		})
	}
}

// TestCombineOverlapCLI: on every backend, combine --expect-workers
// plans a stage while it is written: --group forms a group once its
// workers have committed (and refuses before), --task runs a task of it,
// the combined --seal refuses before the first level's seal, naming the
// worker not committed; after the first level's seal, --group with
// --group-workers forms the last group as the engine names it, and
// combine runs the rest and seals: read returns the rows read as
// written. seal --combine of a stage too small to pay says so with the
// plan's figures.
func TestCombineOverlapCLI(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			tg := newTarget(t, b)
			plan := []string{"combine", "-q", "q", "--expect-workers", "4", "--expect-partitions", "4", "--expect-bytes", "1MiB", "--groups", "2", "--buckets", "2"}
			for w := range 3 {
				in := arrowStream(t, testBatches(t, w*1000, w*1000+1000, 100))
				tg.run(t, in, "write", "-q", "q", "-w", fmt.Sprint(w), "--partitions", "4", "--partition-by", "id").must(t)
			}
			if out := tg.run(t, nil, append(plan, "--group", "0")...).must(t).stdout; !strings.Contains(out, "group 0: workers 0, 1") {
				t.Errorf("group 0:\n%s", out)
			}
			if r := tg.run(t, nil, append(plan, "--group", "1")...); r.code == 0 || !strings.Contains(r.stderr, "group 1 needs 2 more workers to commit; 1 of them have") {
				t.Errorf("group 1 before worker 3 commits: exit %d\n%s", r.code, r.stderr)
			}
			if out := tg.run(t, nil, append(plan, "--task", "2")...).must(t).stdout; !strings.Contains(out, "task 2 (c2) committed") {
				t.Errorf("task 2 (group 0, bucket 1):\n%s", out)
			}
			if r := tg.run(t, nil, append(plan, "--seal")...); r.code == 0 || !strings.Contains(r.stderr, "1 of workers 0..3 have not committed: 3") {
				t.Errorf("combined seal with worker 3 not committed: exit %d\n%s", r.code, r.stderr)
			}
			in := arrowStream(t, testBatches(t, 3000, 4000, 100))
			tg.run(t, in, "write", "-q", "q", "-w", "3", "--partitions", "4", "--partition-by", "id").must(t)
			tg.run(t, nil, "seal", "-q", "q", "--workers", "4").must(t)
			before := tg.run(t, nil, "read", "-q", "q", "--partitions", "0-3", "--format", "jsonl").must(t).stdout
			if out := tg.run(t, nil, append(plan, "--group", "1", "--group-workers", "2,3")...).must(t).stdout; !strings.Contains(out, "group 1: workers 2, 3") {
				t.Errorf("group 1 named by the engine:\n%s", out)
			}
			var all combineSummary
			tg.run(t, nil, append(plan, "--parallel", "2", "--json")...).must(t).decode(t, &all)
			if !all.Sealed || !all.Combined || all.Plan == nil || !all.Plan.Overlap {
				t.Fatalf("combine the rest: %+v", all)
			}
			if got := tg.run(t, nil, "read", "-q", "q", "--partitions", "0-3", "--format", "jsonl").must(t).stdout; got != before {
				t.Errorf("read after combining differs: %d bytes, %d before", len(got), len(before))
			}

			for w := range 2 {
				in := arrowStream(t, testBatches(t, w*10, w*10+10, 10))
				tg.run(t, in, "write", "-q", "s", "-w", fmt.Sprint(w), "--partitions", "2", "--partition-by", "id").must(t)
			}
			var s sealSummary
			tg.run(t, nil, "seal", "-q", "s", "--workers", "2", "--combine", "--json").must(t).decode(t, &s)
			if !s.Sealed || s.Combined || s.Plan == nil || s.Plan.Predict.Pays {
				t.Fatalf("seal --combine of 2 x 2: %+v", s)
			}
			if out := tg.run(t, nil, "seal", "-q", "s", "--workers", "2", "--combine").must(t).stdout; !strings.Contains(out, "not combined: combining does not pay: readers 8 GETs") {
				t.Errorf("seal --combine of 2 x 2:\n%s", out)
			}
		})
	}
}
