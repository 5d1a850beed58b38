package gc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/gchold"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// spreads are the key_spread settings the combined-stage tests run with:
// objects under the stage's prefix, and spread over 4 shard prefixes.
var spreads = []int{0, 4}

// combineClient is a client of a fresh bucket of b with key_spread
// spread, the raw store under it, and a recStore over the raw store.
func combineClient(t *testing.T, b testenv.Backend, spread int) (*durashuffle.Client, store.Store, *recStore) {
	t.Helper()
	ep := b.Start(t)
	raw, _ := ep.NewStore(t)
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket = ep.Bucket
	cfg.Store.RetryBaseDelay = durashuffle.Duration(10 * time.Millisecond)
	cfg.Write.KeySpread = spread
	c := testenv.Client(t, cfg, durashuffle.WithStore(raw))
	t.Cleanup(c.Close)
	return c, raw, &recStore{Store: raw}
}

// sealStage commits 4 workers of 100 rows each (values lo..lo+400) and
// seals the stage.
func sealStage(t *testing.T, c *durashuffle.Client, query string, stage int, results bool, lo int) {
	t.Helper()
	for w := range 4 {
		commit(t, c, query, stage, fmt.Sprint(w), results, lo+100*w, 100)
	}
	if _, err := c.Seal(context.Background(), query, stage, 4); err != nil {
		t.Fatal(err)
	}
}

// combineAll combines a sealed stage into groups x buckets tasks and
// seals the combined level.
func combineAll(t *testing.T, c *durashuffle.Client, query string, stage, groups, buckets int) *combine.Stage {
	t.Helper()
	ctx := context.Background()
	cs, err := c.Combine(ctx, query, stage, combine.Options{Groups: groups, Buckets: buckets})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	return cs
}

// content is a stage's rows and the sum of their values, read whole.
func content(t *testing.T, c *durashuffle.Client, query string, stage int) (string, error) {
	t.Helper()
	st, err := c.OpenStage(context.Background(), query, stage)
	if err != nil {
		return "", err
	}
	recs, err := st.ReadPartitions(context.Background(), nil)
	if err != nil {
		return "", err
	}
	defer recs.Release()
	var n, sum int64
	for recs.Next() {
		rec := recs.RecordBatch()
		v := rec.Column(0).(*array.Int64)
		for i := range v.Len() {
			sum += v.Value(i)
		}
		n += rec.NumRows()
	}
	return fmt.Sprintf("%d rows, sum %d", n, sum), recs.Err()
}

// stageKeys lists every key of a stage: under its prefix and, spread,
// under the shard prefixes.
func stageKeys(t *testing.T, st store.Store, l manifest.Layout, query string, stage int) []string {
	t.Helper()
	var out []string
	for _, k := range keysOf(t, st, l.Root()) {
		if strings.Contains(k, query+"/stage-"+fmt.Sprint(stage)+"/") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func getAll(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	body, err := st.GetRange(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExpireCombined: on every backend, with and without key_spread, a
// combined results stage past results_retention is deleted whole, both
// levels: its combined level's manifest first, then the stage manifest,
// then the worker and task manifests, then the writers' and the
// combined objects and the indexes; nothing of it is left under the
// stage's prefix or a shard prefix, and the report counts both levels.
// A first-level grace that is also due does not keep it from expiring.
// The combined intermediate stage of the same query loses only its
// first level (past the grace), worker manifests before their objects,
// and reads the same rows. A second run finds nothing.
func TestExpireCombined(t *testing.T) {
	for _, b := range backends {
		for _, spread := range spreads {
			t.Run(fmt.Sprintf("%s/spread-%d", b.Name, spread), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				c, raw, rec := combineClient(t, b, spread)
				l := c.Layout()
				sealStage(t, c, "qx", 0, false, 0)
				sealStage(t, c, "qx", 1, true, 1000)
				want0, err := content(t, c, "qx", 0)
				if err != nil {
					t.Fatal(err)
				}
				combineAll(t, c, "qx", 0, 2, 2)
				combineAll(t, c, "qx", 1, 2, 2)
				expired := stageKeys(t, raw, l, "qx", 1)
				if len(expired) != 1+1+1+4+4+4+4+1 { // manifest, combined.json, first index, worker manifests, data, task manifests, task data, combined index
					t.Fatalf("stage 1 holds %d keys: %v", len(expired), expired)
				}
				start := time.Now()
				o := func(after time.Duration) gc.Options {
					now := start.Add(after)
					return gc.Options{OlderThan: time.Hour, ResultsRetention: time.Hour, CombinedGrace: time.Hour, Now: func() time.Time { return now }}
				}

				if r, err := gc.Run(ctx, rec, l, o(30*time.Minute)); err != nil || r.Totals != (gc.Totals{}) {
					t.Fatalf("gc at +30m: %+v %v", r.Totals, err)
				}
				rec.calls()
				r, err := gc.Run(ctx, rec, l, o(2*time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Stages) != 1 {
					t.Fatalf("gc at +2h deleted stages %+v", r.Stages)
				}
				s := r.Stages[0]
				s.Bytes, s.CommittedAt = 0, time.Time{}
				// combined.json, manifest.json, 4 worker and 4 task manifests,
				// the combined index; 4 writers' and 4 combined objects.
				if want := (gc.Stage{Query: "qx", Stage: 1, Results: true, Sealed: true, Manifests: 11, Objects: 8}); s != want {
					t.Errorf("expired %+v, want %+v", s, want)
				}
				// Stage 0's first level (4 + 4 + its index) and stage 1's
				// first-level index, which no manifest names.
				if r.Totals.OrphanObjects != 10 || r.Totals.ObjectsDeleted != 10+19 {
					t.Errorf("gc at +2h: %+v, orphans %v", r.Totals, r.Orphans)
				}
				if left := stageKeys(t, raw, l, "qx", 1); len(left) != 0 {
					t.Errorf("left of the expired stage: %v", left)
				}
				calls := rec.calls()
				cj, sm := indexOf(calls, l.StagePrefix("qx", 1)+combine.CombinedName), indexOf(calls, l.StageManifestKey("qx", 1))
				if cj < 0 || sm <= cj {
					t.Errorf("combined.json deleted in call %d, the stage manifest in %d: want combined.json first", cj, sm)
				}
				lastManifest := sm
				for _, k := range expired {
					if strings.HasSuffix(k, "/manifest.json") && !strings.HasSuffix(k, "stage-1/manifest.json") || strings.Contains(k, "/task-") && strings.HasSuffix(k, ".bin") {
						if i := indexOf(calls, k); i <= sm {
							t.Errorf("%s deleted in call %d, not after the stage manifest (%d)", k, i, sm)
						} else {
							lastManifest = max(lastManifest, i)
						}
					}
				}
				for _, k := range expired {
					if strings.HasSuffix(k, ".arrows") || strings.Contains(k, "index-") {
						if i := indexOf(calls, k); i <= lastManifest {
							t.Errorf("%s deleted in call %d, before the last manifest (%d)", k, i, lastManifest)
						}
					}
				}
				for _, k := range stageKeys(t, raw, l, "qx", 0) {
					rel := strings.TrimPrefix(k, l.StagePrefix("qx", 0))
					if !strings.Contains(k, "/combine-") && rel != combine.CombinedName && rel != "manifest.json" {
						t.Errorf("stage 0 keeps %s past the first level's grace", k)
					}
				}
				for w := range 4 {
					wm := indexOf(calls, l.WorkerManifestKey("qx", 0, fmt.Sprint(w)))
					for _, k := range calls[len(calls)-1] {
						if strings.Contains(k, "qx/stage-0/worker-") && strings.HasSuffix(k, ".arrows") && indexOf(calls, k) <= wm {
							t.Errorf("%s deleted with or before its worker manifest", k)
						}
					}
				}
				if got, err := content(t, c, "qx", 0); err != nil || got != want0 {
					t.Errorf("stage 0 after gc: %s, %v; want %s", got, err, want0)
				}
				if _, err := content(t, c, "qx", 1); err == nil {
					t.Errorf("the expired stage still reads")
				}
				if r, err := gc.Run(ctx, rec, l, o(2*time.Hour)); err != nil || r.Totals != (gc.Totals{}) {
					t.Errorf("second run: %+v %v", r.Totals, err)
				}
			})
		}
	}
}

// TestCombineLeftovers: on every backend, with and without key_spread,
// the keys of combining a stage that was never combined go by the plan,
// once its newest key and its newest open upload are older than
// --older-than: a plan with old tasks and one task committed since keeps
// them all, as does a plan with an upload begun since; a plan whose
// tasks are all old goes whole, task manifests first. Later every plan
// goes, the first level stays and reads the same rows, and the stage
// combines again with the same plan. A stage whose combined level's
// manifest is committed while its stage manifest is still the first
// level's (a seal stopped between its two puts) loses nothing, and the
// next seal finishes it.
func TestCombineLeftovers(t *testing.T) {
	for _, b := range backends {
		for _, spread := range spreads {
			t.Run(fmt.Sprintf("%s/spread-%d", b.Name, spread), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				c, raw, rec := combineClient(t, b, spread)
				l := c.Layout()
				sealStage(t, c, "ql", 0, false, 0)
				want, err := content(t, c, "ql", 0)
				if err != nil {
					t.Fatal(err)
				}
				level1 := getAll(t, raw, l.StageManifestKey("ql", 0))
				firstLevel := stageKeys(t, raw, l, "ql", 0)
				open := func(groups, buckets int) *combine.Stage {
					t.Helper()
					cs, err := c.Combine(ctx, "ql", 0, combine.Options{Groups: groups, Buckets: buckets})
					if err != nil {
						t.Fatal(err)
					}
					return cs
				}
				run := func(cs *combine.Stage, n int) *combine.Task {
					t.Helper()
					task, err := cs.RunTask(ctx, n)
					if err != nil {
						t.Fatal(err)
					}
					return task
				}
				put := func(key string) {
					t.Helper()
					if err := raw.Put(ctx, key, []byte("killed attempt"), store.PutOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				upload := func(key string) {
					t.Helper()
					if _, err := raw.CreateMultipart(ctx, key); err != nil {
						t.Fatal(err)
					}
				}
				taskKey := func(cs *combine.Stage, n int, write string) string {
					return l.ObjectKey("ql", 0, l.TaskDataKey("ql", 0, cs.Plan().ID, n, write))
				}

				// Old: plan A's tasks 0 and 1, a killed attempt of its task
				// 2 and an upload of its task 3; plan B's killed attempt;
				// plan C's task 0.
				a, bp, cp := open(2, 2), open(1, 1), open(4, 2)
				run(a, 0)
				run(a, 1)
				put(taskKey(a, 2, "00000000000000ff"))
				upload(taskKey(a, 3, "00000000000000ee"))
				put(taskKey(bp, 0, "00000000000000ff"))
				ct := run(cp, 0)
				old := time.Now()
				// Three seconds on (LastModified may be whole seconds):
				// plan A's task 2 commits, and plan B's task 0 begins an
				// upload.
				time.Sleep(3 * time.Second)
				run(a, 2)
				upload(taskKey(bp, 0, "00000000000000dd"))

				// The cutoff between the two: plan C goes, A and B stay.
				now := old.Add(time.Hour + 1200*time.Millisecond)
				rec.calls()
				r, err := gc.Run(ctx, rec, l, gc.Options{OlderThan: time.Hour, ResultsRetention: time.Hour, Now: func() time.Time { return now }})
				if err != nil {
					t.Fatal(err)
				}
				cm := l.ObjectKey("ql", 0, manifest.TaskManifestName(cp.Plan().ID, 0))
				cd := l.ObjectKey("ql", 0, ct.Manifest.Objects[0].Key)
				var gone []string
				for _, o := range r.Orphans {
					gone = append(gone, o.Key)
				}
				if !slices.Equal(gone, []string{cm, cd}) {
					t.Errorf("gc between the plans' ages deleted %v, want plan C's task manifest and object %v", gone, []string{cm, cd})
				}
				if calls := rec.calls(); indexOf(calls, cm) < 0 || indexOf(calls, cd) <= indexOf(calls, cm) {
					t.Errorf("delete calls %v: want plan C's task manifest before its object", calls)
				}
				if len(r.Uploads) != 1 || r.Uploads[0].Key != taskKey(a, 3, "00000000000000ee") {
					t.Errorf("aborted %+v, want plan A's old upload only", r.Uploads)
				}
				for _, cs := range []*combine.Stage{a, bp} {
					if n := len(planKeys(t, raw, cs.Plan().ID)); n == 0 {
						t.Errorf("plan %s lost its keys", cs.Plan().ID)
					}
				}

				// Later: every plan goes; the first level stays.
				later := time.Now().Add(2 * time.Hour)
				r, err = gc.Run(ctx, rec, l, gc.Options{OlderThan: time.Hour, ResultsRetention: time.Hour, Now: func() time.Time { return later }})
				if err != nil {
					t.Fatal(err)
				}
				// Plan A: 3 task manifests, 3 objects, the killed attempt;
				// plan B: the killed attempt.
				if r.Totals.OrphanObjects != 8 || r.Totals.UploadsAborted != 1 || r.Totals.StagesDeleted != 0 {
					t.Errorf("gc at +2h: %+v: %v", r.Totals, r.Orphans)
				}
				if got := stageKeys(t, raw, l, "ql", 0); !slices.Equal(got, firstLevel) {
					t.Errorf("the stage holds %v, want its first level %v", got, firstLevel)
				}
				if ups := uploadKeys(t, raw); len(ups) != 0 {
					t.Errorf("uploads left: %v", ups)
				}
				if got, err := content(t, c, "ql", 0); err != nil || got != want {
					t.Errorf("after the leftovers went: %s, %v; want %s", got, err, want)
				}

				// Combined again by plan A's sizes; then the stage manifest
				// is the first level's again, as after a seal stopped
				// between combined.json and manifest.json.
				again := combineAll(t, c, "ql", 0, 2, 2)
				if again.Plan().ID != a.Plan().ID {
					t.Fatalf("plan %s, want %s again", again.Plan().ID, a.Plan().ID)
				}
				if err := raw.Put(ctx, l.StageManifestKey("ql", 0), level1, store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				before := stageKeys(t, raw, l, "ql", 0)
				far := time.Now().Add(10 * time.Hour)
				r, err = gc.Run(ctx, rec, l, gc.Options{OlderThan: time.Hour, ResultsRetention: time.Hour, CombinedGrace: time.Hour, Now: func() time.Time { return far }})
				if err != nil || r.Totals != (gc.Totals{}) {
					t.Errorf("gc of a stage with combined.json and the first level's manifest: %+v %v: %v", r.Totals, err, r.Orphans)
				}
				if got := stageKeys(t, raw, l, "ql", 0); !slices.Equal(got, before) {
					t.Errorf("the stage holds %v, had %v", got, before)
				}
				if _, err := open(2, 2).Seal(ctx); err != nil {
					t.Fatal(err)
				}
				if got := getAll(t, raw, l.StageManifestKey("ql", 0)); string(got) == string(level1) {
					t.Errorf("the seal did not publish the combined level")
				}
				if got, err := content(t, c, "ql", 0); err != nil || got != want {
					t.Errorf("combined: %s, %v; want %s", got, err, want)
				}
			})
		}
	}
}

// planKeys lists every key of a plan, wherever key_spread put it.
func planKeys(t *testing.T, st store.Store, plan string) []string {
	t.Helper()
	var out []string
	for _, k := range keysOf(t, st, "") {
		if strings.Contains(k, "/combine-"+plan+"/") {
			out = append(out, k)
		}
	}
	return out
}

// holdHook calls after once, after its first Put of a combined.json,
// and del after each Delete of task manifests.
type holdHook struct {
	store.Store
	after func()
	del   func()
}

func (h *holdHook) Delete(ctx context.Context, keys ...string) error {
	err := h.Store.Delete(ctx, keys...)
	if h.del != nil && len(keys) > 0 && strings.HasSuffix(keys[0], ".bin") && strings.Contains(keys[0], "/task-") {
		h.del()
	}
	return err
}

func (h *holdHook) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	err := h.Store.Put(ctx, key, body, o)
	if h.after != nil && strings.HasSuffix(key, "/"+combine.CombinedName) {
		f := h.after
		h.after = nil
		f()
	}
	return err
}

// TestCombineHold: on every backend, gc deletes a plan left over while
// it holds the stage's combined.json. A seal of the plan meanwhile fails
// naming the hold (the plan itself can be made); once gc is done the
// hold is gone. Another gc's hold younger than --older-than makes gc
// leave the stage's leftovers alone and say so; one older (a gc killed
// while it held the stage), or one that does not decode, is taken over
// and removed, with or without leftovers. A gc that finds its hold
// replaced after deleting the task manifests deletes nothing more; one
// that finds a plan written since it planned leaves that plan's keys.
// The stage then combines.
func TestCombineHold(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, raw, _ := combineClient(t, b, 0)
			l := c.Layout()
			const query = "qh"
			sealStage(t, c, query, 0, false, 0)
			want, err := content(t, c, query, 0)
			if err != nil {
				t.Fatal(err)
			}
			ckey := l.StagePrefix(query, 0) + combine.CombinedName
			base := time.Now()
			gcAt := func(st store.Store, at time.Duration) gc.Report {
				t.Helper()
				r, err := gc.Run(ctx, st, l, gc.Options{OlderThan: time.Hour, ResultsRetention: 24 * time.Hour, Now: func() time.Time { return base.Add(at) }})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			leftOver := func() string {
				t.Helper()
				cs, err := c.Combine(ctx, query, 0, combine.Options{Groups: 2, Buckets: 2})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cs.RunAll(ctx, 2); err != nil {
					t.Fatal(err)
				}
				return cs.Plan().ID
			}
			putHold := func(plans []string, at time.Time) []byte {
				t.Helper()
				_, hb := gchold.New(plans, at)
				if err := raw.Put(ctx, ckey, hb, store.PutOptions{IfNoneMatch: true}); err != nil {
					t.Fatal(err)
				}
				return hb
			}
			absent := func(when string) {
				t.Helper()
				if _, err := raw.GetRange(ctx, ckey, 0, -1); !store.IsNotFound(err) {
					t.Fatalf("%s: %s: %v, want it gone", when, ckey, err)
				}
			}

			// A seal while gc holds the stage: refused, naming the hold.
			plan := leftOver()
			var sealErr, openErr error
			hooked := &holdHook{Store: raw, after: func() {
				cs, err := c.Combine(ctx, query, 0, combine.Options{Groups: 2, Buckets: 2})
				if openErr = err; err == nil {
					_, sealErr = cs.Seal(ctx)
				}
			}}
			if r := gcAt(hooked, 2*time.Hour); r.Totals.OrphanObjects == 0 {
				t.Fatalf("gc deleted nothing of plan %s: %+v", plan, r)
			}
			if openErr != nil {
				t.Fatalf("a plan made while gc holds the stage: %v", openErr)
			}
			if !errors.Is(sealErr, combine.ErrMissingTasks) || !strings.Contains(sealErr.Error(), "held by gc") {
				t.Fatalf("a seal while gc holds the stage: %v, want ErrMissingTasks naming the hold", sealErr)
			}
			absent("after gc")
			if n := len(planKeys(t, raw, plan)); n != 0 {
				t.Fatalf("plan %s keeps %d keys after gc", plan, n)
			}

			// Another gc's hold, younger than --older-than: nothing goes.
			plan = leftOver()
			fresh := putHold([]string{plan}, base.Add(2*time.Hour))
			kept := planKeys(t, raw, plan)
			r := gcAt(raw, 2*time.Hour)
			if !slices.ContainsFunc(r.Skipped, func(s string) bool { return strings.HasPrefix(s, ckey+": held by gc") }) {
				t.Errorf("gc beside another's hold: skipped %q, want the hold named", r.Skipped)
			}
			if got := planKeys(t, raw, plan); !slices.Equal(got, kept) {
				t.Errorf("gc beside another's hold deleted keys of plan %s: %v left of %v", plan, got, kept)
			}
			if got := getAll(t, raw, ckey); !slices.Equal(got, fresh) {
				t.Errorf("the other gc's hold is now %q", got)
			}

			// The same hold, older than --older-than: taken over, the plan
			// deleted, the hold removed.
			gcAt(raw, 50*time.Hour)
			absent("after a stale hold was taken over")
			if n := len(planKeys(t, raw, plan)); n != 0 {
				t.Fatalf("plan %s keeps %d keys after its stale hold was taken over", plan, n)
			}
			// A stale hold and nothing of a plan: removed.
			putHold(nil, base)
			gcAt(raw, 50*time.Hour)
			absent("a stale hold alone")
			// A hold of another make, larger than the bytes gc reads of
			// combined.json, that does not decode from them: stale, and
			// removed.
			big := []byte(`{"kind":"gc-hold","id":"0000000000000000","plans":["` + strings.Repeat("0123456789abcdef", 2*gchold.ReadBytes) + `"]}`)
			if err := raw.Put(ctx, ckey, big, store.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatal(err)
			}
			gcAt(raw, 50*time.Hour)
			absent("a hold larger than gc reads")

			// gc finds combined.json no longer its hold once it has
			// deleted the task manifests (a delete that raced the hold, and
			// a seal's put): it deletes nothing more, and says so.
			plan = leftOver()
			stand := []byte(`{"format_version":"3.0","kind":"stage"}`)
			replaced := &holdHook{Store: raw}
			var deleted bool
			replaced.del = func() {
				if deleted {
					return
				}
				deleted = true
				if err := raw.Delete(ctx, ckey); err != nil {
					t.Error(err)
				}
				if err := raw.Put(ctx, ckey, stand, store.PutOptions{IfNoneMatch: true}); err != nil {
					t.Error(err)
				}
			}
			r = gcAt(replaced, 2*time.Hour)
			if !slices.ContainsFunc(r.Skipped, func(s string) bool { return strings.HasPrefix(s, ckey+": no longer gc's hold") }) {
				t.Errorf("gc whose hold was replaced: skipped %q", r.Skipped)
			}
			if got := getAll(t, raw, ckey); !slices.Equal(got, stand) {
				t.Errorf("%s is %q after gc, want what replaced its hold", ckey, got)
			}
			for _, k := range planKeys(t, raw, plan) {
				if strings.HasSuffix(k, "/task-0.bin") {
					t.Errorf("task manifest %s left: gc deletes them first", k)
				}
			}
			if n := len(planKeys(t, raw, plan)); n == 0 {
				t.Errorf("gc whose hold was replaced deleted every key of plan %s", plan)
			}
			if err := raw.Delete(ctx, ckey); err != nil {
				t.Fatal(err)
			}
			gcAt(raw, 2*time.Hour) // the rest of the plan

			// A task of the plan commits between gc's plan and its hold:
			// once it holds the stage, gc lists the plan again and leaves
			// all of its keys.
			cs, err := c.Combine(ctx, query, 0, combine.Options{Groups: 2, Buckets: 2})
			if err != nil {
				t.Fatal(err)
			}
			for n := range 2 {
				if _, err := cs.RunTask(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			old := time.Now()
			time.Sleep(3 * time.Second) // LastModified may be whole seconds
			p, err := gc.NewPlan(ctx, raw, l, gc.Options{OlderThan: time.Hour, ResultsRetention: 24 * time.Hour, Now: func() time.Time { return old.Add(time.Hour + 1500*time.Millisecond) }})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cs.RunTask(ctx, 2); err != nil {
				t.Fatal(err)
			}
			before := planKeys(t, raw, cs.Plan().ID)
			if r, err = p.Apply(ctx, raw); err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(r.Skipped, func(s string) bool {
				return strings.Contains(s, "written since gc planned to delete plan "+cs.Plan().ID)
			}) {
				t.Errorf("gc of a plan written since it planned: skipped %q", r.Skipped)
			}
			if got := planKeys(t, raw, cs.Plan().ID); !slices.Equal(got, before) {
				t.Errorf("gc of a plan written since it planned left %v of %v", got, before)
			}
			absent("after gc left a plan written since it planned")
			gcAt(raw, 50*time.Hour)

			if got, err := content(t, c, query, 0); err != nil || got != want {
				t.Fatalf("first level after the holds: %s, %v; want %s", got, err, want)
			}
			combineAll(t, c, query, 0, 2, 2)
			if got, err := content(t, c, query, 0); err != nil || got != want {
				t.Fatalf("combined after the holds: %s, %v; want %s", got, err, want)
			}
		})
	}
}
