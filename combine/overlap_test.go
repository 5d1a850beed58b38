package combine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// commitWorker writes worker w of a stage of P partitions (rows rows of
// blob bytes in each partition, ids unique per worker) and commits it.
func commitWorker(t *testing.T, e *env, query string, w, P, rows, blob int) error {
	t.Helper()
	_, err := commitStageWorker(t, e, query, 0, w, P, rows, blob)
	return err
}

// commitAll commits workers 0..W-1 of query's stage 0, as commitWorker
// does each.
func commitAll(t *testing.T, e *env, query string, W, P, rows, blob int) {
	t.Helper()
	for w := range W {
		if err := commitWorker(t, e, query, w, P, rows, blob); err != nil {
			t.Fatal(err)
		}
	}
}

// commitStageWorker is commitWorker of any stage, returning the manifest
// Commit returned.
func commitStageWorker(t *testing.T, e *env, query string, stage, w, P, rows, blob int) (*manifest.Worker, error) {
	t.Helper()
	ctx := context.Background()
	wr, err := e.c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Stage: stage, Worker: fmt.Sprint(w), Partitions: P})
	if err != nil {
		t.Fatal(err)
	}
	for p := range P {
		rec := batch(int64((w*P+p)*rows), rows, blob)
		err := wr.Write(p, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	return wr.Commit(ctx)
}

// TestCombineOverlap: tasks of a plan made while the stage is written
// run as soon as their group's workers have committed, before the other
// workers write; the combined seal, after the first level's, gives the
// readers the rows of the first level, partition by partition in the
// same order (workers commit in ID order here), in fewer GETs; every
// process makes the same plan; a group cannot form before its workers
// commit; the seal refuses before the first level is sealed, naming the
// workers that have not committed.
func TestCombineOverlap(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const W, P, rows, blob = 8, 8, 20, 2000
		o := combine.Options{Groups: 4, Buckets: 2, Expected: combine.Expect(W, P, W*P*rows*blob)}
		s, err := e.c.Combine(ctx, "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		p := s.Plan()
		if p == nil || !p.Overlap || len(p.Groups) != 4 || len(p.Buckets) != 2 {
			t.Fatalf("plan %+v, want 4 groups x 2 buckets made while the stage is written", p)
		}
		for w := range 3 {
			if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
				t.Fatal(err)
			}
		}
		// Group 0 (workers 0 and 1) is ready; group 1 has one of two.
		for j := range 2 {
			tk, err := s.RunTask(ctx, j*4)
			if err != nil || !tk.Wrote {
				t.Fatalf("task %d of group 0 while workers 3..7 have not written: %v", j*4, err)
			}
		}
		if _, err := s.FormGroup(ctx, 1, nil); !errors.Is(err, combine.ErrGroupNotReady) || !strings.Contains(err.Error(), "group 1 needs 2 more workers to commit; 1 of them have") {
			t.Fatalf("group 1 with one of its workers committed: %v, want ErrGroupNotReady saying 1 of 2", err)
		}
		for w := 3; w < W; w++ {
			if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
				t.Fatal(err)
			}
		}
		// Another process makes the same plan and runs the rest.
		other, err := e.c.Combine(ctx, "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		if other.Plan().ID != p.ID {
			t.Fatalf("plans %s and %s of one expectation", p.ID, other.Plan().ID)
		}
		tasks, err := other.RunAll(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		wrote := 0
		for _, tk := range tasks {
			if tk.Wrote {
				wrote++
			}
		}
		if wrote != 6 {
			t.Errorf("the second process wrote %d tasks, want the 6 the first did not", wrote)
		}
		for g := range 4 {
			ids, err := other.FormGroup(ctx, g, nil)
			if want := fmt.Sprint(2*g) + " " + fmt.Sprint(2*g+1); err != nil || strings.Join(ids, " ") != want {
				t.Errorf("group %d: %v %v, want workers %s (commit order)", g, ids, err, want)
			}
		}
		if _, err := other.Seal(ctx); !errors.Is(err, combine.ErrNotSealed) || !strings.Contains(err.Error(), "every worker 0..7 has committed: seal the first level first (seal --workers 8)") {
			t.Fatalf("combined seal before the first level's: %v", err)
		}
		if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
			t.Fatal(err)
		}
		want, direct := readEach(t, e, "q", P)
		m, err := other.Seal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Combines == nil || m.Combines.Workers != W || len(m.Workers) != 8 {
			t.Fatalf("combined level of %d tasks from %+v", len(m.Workers), m.Combines)
		}
		got, combined := readEach(t, e, "q", P)
		for i := range want {
			if want[i] != got[i] {
				t.Errorf("partition %d: %d rows %x as written, %d rows %x combined", i, want[i].Rows, want[i].Hash[:4], got[i].Rows, got[i].Hash[:4])
			}
		}
		if combined >= direct {
			t.Errorf("readers made %d GETs combined, %d as written", combined, direct)
		}
		// Sealing the first level again returns the combined level.
		again, err := e.c.Seal(ctx, "q", 0, W)
		if err != nil || again.Combines == nil {
			t.Fatalf("first-level seal after the combined seal: %v", err)
		}
	})
}

// TestCombineOverlapRunAllGroupByGroup: RunAll of a plan made while the
// stage was written runs its tasks group by group, forming each group as
// its first task comes up and dropping its workers' manifests after its
// last: with 2 tasks at once over 2 buckets it holds at most 3 groups'
// manifests of 8 (a run that formed every group first held all 8 to the
// end), none once it returns; it reads each worker manifest once, as the
// plan predicts, and the combined stage reads back the rows as written.
func TestCombineOverlapRunAllGroupByGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const W, P, rows, blob = 16, 4, 10, 1000
		commitAll(t, e, "q", W, P, rows, blob)
		if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
			t.Fatal(err)
		}
		direct, _ := readEach(t, e, "q", P)
		start := e.counter.Requests()
		s, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 8, Buckets: 2, Expected: combine.Expect(W, P, W*P*rows*blob)})
		if err != nil {
			t.Fatal(err)
		}
		var most int
		stop, polled := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(polled)
			for {
				most = max(most, combine.HeldGroups(s))
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Microsecond):
				}
			}
		}()
		tasks, err := s.RunAll(ctx, 2)
		close(stop)
		<-polled
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != 16 {
			t.Fatalf("%d tasks, want 8 groups x 2 buckets", len(tasks))
		}
		if most > 3 || most == 0 {
			t.Errorf("RunAll held the manifests of up to %d groups at once, want 1 to 3", most)
		}
		if held := combine.HeldGroups(s); held != 0 {
			t.Errorf("after RunAll %d groups' manifests are still held", held)
		}
		sealAsPredicted(t, e, s, start, direct, "a run group by group")
	})
}

// TestCombineOverlapCommitsHanded: an engine that hands the stage its
// writers' committed manifests (Writer.Commit's results) forms every
// group and runs every task with no GET of a worker manifest, as the
// plan made with CommitsHanded predicts to the request, and the combined
// stage reads back the rows as written. A manifest of another stage, of
// a worker outside the plan, without its frames, or a worker handed at
// two attempts is refused by name; a handed attempt that is not the one
// stored fails the combined seal, naming the worker.
func TestCombineOverlapCommitsHanded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const W, P, rows, blob = 8, 4, 10, 1000
		o := combine.Options{Groups: 2, Buckets: 2, CommitsHanded: true, Expected: combine.Expect(W, P, W*P*rows*blob)}
		// The client's one check of the store's conditional writes is
		// not combining's.
		if err := e.c.CheckCommitGuard(ctx); err != nil {
			t.Fatal(err)
		}
		start := e.counter.Requests()
		s, err := e.c.Combine(ctx, "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		// The writers' requests, the first level's seal and the direct
		// reads are not combining's.
		notCombining := func(fn func()) {
			before := e.counter.Requests()
			fn()
			for op, n := range reqs.Diff(e.counter.Requests(), before) {
				start[op] += n
			}
		}
		var handed []*manifest.Worker
		for w := range W {
			notCombining(func() { handed = append(handed, commitHanded(t, e, "q", 0, w, P, rows, blob)) })
			if err := s.Committed(handed[w]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.RunAll(ctx, 2); err != nil {
			t.Fatal(err)
		}
		var direct []partitionDigest
		notCombining(func() {
			if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
				t.Fatal(err)
			}
			direct, _ = readEach(t, e, "q", P)
		})
		sealAsPredicted(t, e, s, start, direct, "groups of handed commits")
		if n := combine.HandedCount(s); n != 0 {
			t.Errorf("after every group ran, %d handed manifests are still held", n)
		}
		// Handed again once its group ran: nothing held; at another
		// attempt: refused, naming the group's.
		if err := s.Committed(handed[5]); err != nil || combine.HandedCount(s) != 0 {
			t.Errorf("worker 5 handed again at its attempt: %v, %d held", err, combine.HandedCount(s))
		}
		again := *handed[5]
		again.Attempt = "not-" + handed[5].Attempt
		if err := s.Committed(&again); !errors.Is(err, combine.ErrGroupConflict) || !strings.Contains(err.Error(), "a group holds it at attempt "+handed[5].Attempt) {
			t.Errorf("worker 5 handed at another attempt after its group formed: %v, want ErrGroupConflict", err)
		}

		// Refusals, each naming what is wrong.
		r, err := e.c.Combine(ctx, "r", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		other := *handed[1]
		other.Stage = 1
		headerOnly := *handed[2]
		headerOnly.Frames = nil
		outside := *handed[3]
		outside.Worker = "8"
		for _, c := range []struct {
			m    *manifest.Worker
			is   error
			want string
		}{
			{handed[0], combine.ErrInvalidPlan, "is of q stage 0"},
			{&other, combine.ErrInvalidPlan, "is of r stage 1"},
			{&headerOnly, combine.ErrInvalidPlan, "holds 0 frames of 0 rows and"},
			{&outside, combine.ErrInvalidPlan, `worker "8" is not one of the plan's workers 0..7`},
		} {
			m := *c.m
			m.Query = "r"
			if c.m == handed[0] {
				m.Query = "q"
			}
			if err := r.Committed(&m); !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("handing %s stage %d worker %s with %d frames: %v, want %v saying %q", m.Query, m.Stage, m.Worker, len(m.Frames), err, c.is, c.want)
			}
		}

		// Worker 0 of query r commits; an engine hands it twice, at its
		// attempt and at another: the second is refused. Handing another
		// attempt first makes a group the first level's seal refuses.
		ms := make([]*manifest.Worker, W)
		for w := range W {
			ms[w] = commitHanded(t, e, "r", 0, w, P, rows, blob)
		}
		wrong := *ms[0]
		wrong.Attempt = "not-" + ms[0].Attempt
		if err := r.Committed(&wrong); err != nil {
			t.Fatal(err)
		}
		if err := r.Committed(ms[0]); !errors.Is(err, combine.ErrGroupConflict) || !strings.Contains(err.Error(), "handed at attempt "+ms[0].Attempt+", and before at attempt "+wrong.Attempt) {
			t.Fatalf("worker 0 handed at two attempts: %v, want ErrGroupConflict naming both", err)
		}
		if err := r.Committed(ms[1:]...); err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunAll(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Seal(ctx, "r", 0, W); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Seal(ctx); !errors.Is(err, combine.ErrGroupConflict) || !strings.Contains(err.Error(), "group 0 read worker 0's attempt "+wrong.Attempt+", the first level names attempt "+ms[0].Attempt) {
			t.Fatalf("combined seal of a group formed from a wrong attempt: %v, want ErrGroupConflict naming worker 0", err)
		}
	})
}

// TestCombineOverlapTasksLoadGroupOnce: a process that runs the tasks of
// groups another process formed loads each group's worker manifests
// once, however many of its tasks start together: its GETs are the
// plan's prediction for one process (a record read for each record
// formed). Tasks of a group no process formed, started together, form
// it once.
func TestCombineOverlapTasksLoadGroupOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const W, P, rows, blob = 16, 4, 10, 1000
		commitAll(t, e, "q", W, P, rows, blob)
		o := combine.Options{Groups: 4, Buckets: 4, Expected: combine.Expect(W, P, W*P*rows*blob)}
		former, err := e.c.Combine(ctx, "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		for g := range 4 {
			if _, err := former.FormGroup(ctx, g, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
			t.Fatal(err)
		}
		direct, _ := readEach(t, e, "q", P)
		start := e.counter.Requests()
		runner, err := e.c.Combine(ctx, "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := runner.RunAll(ctx, 4); err != nil {
			t.Fatal(err)
		}
		if _, err := runner.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		spent := reqs.Diff(e.counter.Requests(), start)
		if got, want := spent["GetObject"], runner.Plan().Predict.Combine.GET; got != want {
			t.Errorf("the runner made %d GETs, want the %d of one worker manifest read per worker", got, want)
		}
		if got, _ := readEach(t, e, "q", P); !slices.Equal(got, direct) {
			t.Errorf("combined %+v, as written %+v", got, direct)
		}

		// The four tasks of group 0 of a plan no process has formed,
		// started together, form the group and read its manifests once:
		// as many requests as when they run one after another.
		run := func(query string, together bool) map[string]int64 {
			commitAll(t, e, query, W, P, rows, blob)
			s, err := e.c.Combine(ctx, query, 0, o)
			if err != nil {
				t.Fatal(err)
			}
			before := e.counter.Requests()
			var wg sync.WaitGroup
			for j := range 4 {
				task := func() {
					if _, err := s.RunTask(ctx, j*4); err != nil {
						t.Error(err)
					}
				}
				if together {
					wg.Go(task)
				} else {
					task()
				}
			}
			wg.Wait()
			return reqs.Diff(e.counter.Requests(), before)
		}
		apart, together := run("apart", false), run("together", true)
		if together["GetObject"] != apart["GetObject"] || putClass(together) != putClass(apart) {
			t.Errorf("group 0's tasks started together made %d GETs and %d PUT-class requests, one after another %d and %d",
				together["GetObject"], putClass(together), apart["GetObject"], putClass(apart))
		}
	})
}

// commitHanded commits worker w as commitWorker does and returns the
// manifest Commit returned.
func commitHanded(t *testing.T, e *env, query string, stage, w, P, rows, blob int) *manifest.Worker {
	t.Helper()
	m, err := commitStageWorker(t, e, query, stage, w, P, rows, blob)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCombineOverlapFaults: a worker retried after a task read its first
// attempt loses its commit and the task's rows stand; two attempts of a
// task meet at one commit point; a group named twice differently is
// refused; a worker that never commits keeps the combined seal from
// running, named; a worker put in two groups, or in none, fails the
// combined seal naming it.
func TestCombineOverlapFaults(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const W, P, rows, blob = 4, 4, 10, 1000
		for w := range W {
			if w == 3 {
				continue // never commits, for now
			}
			if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
				t.Fatal(err)
			}
		}
		o := combine.Options{Groups: 2, Buckets: 2, Expected: combine.Expect(W, P, W*P*rows*blob)}
		a, err := e.c.Combine(ctx, "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.c.Combine(ctx, "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		// Two attempts of task 0 (group 0, bucket 0), in two processes.
		var wg sync.WaitGroup
		got := make([]*combine.Task, 2)
		errs := make([]error, 2)
		for i, s := range []*combine.Stage{a, b} {
			wg.Go(func() { got[i], errs[i] = s.RunTask(ctx, 0) })
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		if got[0].Manifest.Attempt != got[1].Manifest.Attempt || got[0].Wrote == got[1].Wrote {
			t.Fatalf("two attempts of task 0: %s (wrote %v) and %s (wrote %v), want one commit", got[0].Manifest.Attempt, got[0].Wrote, got[1].Manifest.Attempt, got[1].Wrote)
		}
		// Worker 0, read by task 0, runs again: its second attempt loses.
		if err := commitWorker(t, e, "q", 0, P, rows, blob); !errors.Is(err, manifest.ErrAlreadyCommitted) {
			t.Fatalf("a retried worker after its commit: %v, want ErrAlreadyCommitted", err)
		}
		// The engine names group 1 as workers 2 and 3; 3 has not committed.
		if _, err := a.FormGroup(ctx, 1, []string{"2", "3"}); !errors.Is(err, combine.ErrGroupNotReady) || !strings.Contains(err.Error(), "worker 3 has not committed") {
			t.Fatalf("group naming a worker not committed: %v", err)
		}
		// A worker that never commits: the first level cannot seal, and
		// the combined seal names it.
		if _, err := a.Seal(ctx); !errors.Is(err, combine.ErrNotSealed) || !strings.Contains(err.Error(), "1 of workers 0..3 have not committed: 3") {
			t.Fatalf("combined seal with worker 3 never committed: %v", err)
		}
		if err := commitWorker(t, e, "q", 3, P, rows, blob); err != nil {
			t.Fatal(err)
		}
		if _, err := a.FormGroup(ctx, 1, []string{"2", "3"}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.FormGroup(ctx, 1, []string{"3", "1"}); !errors.Is(err, combine.ErrGroupConflict) || !strings.Contains(err.Error(), "was formed with workers 2,3") {
			t.Fatalf("group 1 named again with other workers: %v", err)
		}
		if _, err := b.RunAll(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
			t.Fatal(err)
		}
		want, _ := readEach(t, e, "q", P)
		m, err := a.Seal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Totals.Rows != W*P*rows {
			t.Fatalf("combined %d rows, want %d", m.Totals.Rows, W*P*rows)
		}
		gotD, _ := readEach(t, e, "q", P)
		for i := range want {
			if want[i] != gotD[i] {
				t.Errorf("partition %d: %d rows as written, %d combined", i, want[i].Rows, gotD[i].Rows)
			}
		}

		// Groups that do not hold the first level's workers exactly: a
		// worker in two groups, and (so) one in none.
		for w := range W {
			if err := commitWorker(t, e, "r", w, P, rows, blob); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.c.Seal(ctx, "r", 0, W); err != nil {
			t.Fatal(err)
		}
		r, err := e.c.Combine(ctx, "r", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.FormGroup(ctx, 0, []string{"0", "1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.FormGroup(ctx, 1, []string{"1", "2"}); !errors.Is(err, combine.ErrGroupConflict) || !strings.Contains(err.Error(), "worker 1 is in group 0 already") {
			t.Fatalf("group 1 named with a worker of group 0: %v, want ErrGroupConflict naming it", err)
		}
		// Two processes naming at once can still commit such records:
		// group 1's is put as a racing process would.
		rec := fmt.Sprintf(`{"plan":%q,"group":1,"workers":[{"worker":"1","attempt":%q},{"worker":"2","attempt":%q}]}`,
			r.Plan().ID, attemptOf(t, e, "r", "1"), attemptOf(t, e, "r", "2"))
		if err := e.st.Put(ctx, e.c.Layout().ObjectKey("r", 0, manifest.PlanDir(r.Plan().ID)+"group-1.json"), []byte(rec), store.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunAll(ctx, 2); err != nil {
			t.Fatal(err)
		}
		_, err = r.Seal(ctx)
		if !errors.Is(err, combine.ErrGroupConflict) || !strings.Contains(err.Error(), "worker 1 is in groups 0 and 1") {
			t.Fatalf("combined seal of groups holding worker 1 twice: %v", err)
		}
		if _, err := e.st.GetRange(ctx, e.c.Layout().StagePrefix("r", 0)+combine.CombinedName, 0, -1); !store.IsNotFound(err) {
			t.Fatalf("a refused seal left %s: %v", combine.CombinedName, err)
		}
		if st, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), "r", 0); err != nil || combine.IsCombined(st) {
			t.Fatalf("a refused seal changed the stage manifest: %v", err)
		}
	})
}

// TestCombineOverlapThrottled: with half of all requests answered 503
// SlowDown, writers and the tasks of a plan made while they write,
// groups formed as they commit, and both seals succeed through the
// client's retries; the stage reads back the rows it held as written,
// and no upload is left open.
func TestCombineOverlapThrottled(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e, proxy := throttledEnv(t, b)
			ctx := context.Background()
			const W, P, rows, blob = 4, 4, 64, 4096
			if err := proxy.SetSpec(faultproxy.Spec{SlowDown: 0.5, Seed: 11}); err != nil {
				t.Fatal(err)
			}
			s, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 2, Buckets: 2, PartBytes: 5 << 20, Expected: combine.Expect(W, P, W*P*rows*blob)})
			if err != nil {
				t.Fatal(err)
			}
			for w := range W {
				if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
					t.Fatalf("worker %d under SlowDown: %v", w, err)
				}
				if w == 1 {
					// Group 0 is ready: its tasks run while workers 2 and 3 write.
					for j := range 2 {
						if _, err := s.RunTask(ctx, j*2); err != nil {
							t.Fatalf("task %d under SlowDown: %v", j*2, err)
						}
					}
				}
			}
			if _, err := s.RunAll(ctx, 2); err != nil {
				t.Fatalf("the rest under SlowDown: %v", err)
			}
			if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
				t.Fatal(err)
			}
			if err := proxy.SetSpec(faultproxy.Spec{}); err != nil {
				t.Fatal(err)
			}
			want, _ := readEach(t, e, "q", P)
			if err := proxy.SetSpec(faultproxy.Spec{SlowDown: 0.5, Seed: 12}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Seal(ctx); err != nil {
				t.Fatalf("combined seal under SlowDown: %v", err)
			}
			injected := int64(0)
			for k, n := range proxy.Stats().Injected {
				if k.Fault == faultproxy.FaultSlowDown {
					injected += n
				}
			}
			if injected == 0 {
				t.Fatal("no SlowDown answered: the test proves nothing")
			}
			if err := proxy.SetSpec(faultproxy.Spec{}); err != nil {
				t.Fatal(err)
			}
			got, _ := readEach(t, e, "q", P)
			for i := range want {
				if want[i] != got[i] {
					t.Errorf("partition %d: %d rows as written, %d combined under SlowDown", i, want[i].Rows, got[i].Rows)
				}
			}
			if m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), "q", 0); err != nil || !combine.IsCombined(m) {
				t.Fatalf("the stage is not combined: %v", err)
			}
			if ups, err := e.st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
				t.Errorf("unfinished uploads left: %v %v", ups, err)
			}
		})
	}
}

// TestCombineOverlapKilledTask: a task of a plan made while the stage is
// written, killed in its upload, leaves no object and no upload; run
// again (in another process, which reads the group's record) it commits.
func TestCombineOverlapKilledTask(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const W, P = 2, 2
		for w := range W {
			if err := commitWorker(t, e, "q", w, P, 30, 100_000); err != nil {
				t.Fatal(err)
			}
		}
		o := combine.Options{Groups: 1, Buckets: 1, PartBytes: 5 << 20, Expected: combine.Expect(W, P, 12<<20)}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cs := &cutStore{Store: e.st, cancel: cancel, cut: func(op, key string) bool { return op == "UploadPart" }}
		s, err := combine.Open(cctx, cs, e.c.Layout(), "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunTask(cctx, 0); err == nil || !cs.hit {
			t.Fatalf("a killed task returned %v (cut: %v)", err, cs.hit)
		}
		for _, k := range planKeys(t, e, s.Plan().ID) {
			if !strings.HasSuffix(k, "group-0.json") {
				t.Errorf("a task killed in its upload left %s", k)
			}
		}
		if ups, err := e.st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Errorf("a killed task left uploads %v %v", ups, err)
		}
		again, err := combine.Open(ctx, e.st, e.c.Layout(), "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := again.RunTask(ctx, 0)
		if err != nil || !tk.Wrote || tk.Manifest.Totals.Rows != W*P*30 {
			t.Fatalf("run after the kill: %v %+v", err, tk)
		}
	})
}

// TestCombineOverlapTwoGroups: a stage small enough for one task is
// planned, while it is written, in two groups, so that the first group's
// tasks run while the second's writers write; a plan made after the
// seal, or with Groups forced, keeps its one group.
func TestCombineOverlapTwoGroups(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const W, P = 64, 64
	bytes := int64(256 << 20)
	for _, tc := range []struct {
		name   string
		groups int
		want   int
	}{{"sized", 0, 2}, {"forced", 1, 1}} {
		s, err := e.c.Combine(ctx, "q-"+tc.name, 0, combine.Options{Groups: tc.groups, Expected: combine.Expect(W, P, bytes)})
		if err != nil {
			t.Fatal(err)
		}
		if p := s.Plan(); len(p.Groups) != tc.want || p.Groups[0].Lo != 0 || p.Groups[len(p.Groups)-1].Hi != W {
			t.Errorf("%s: overlapped plan of %d workers has groups %v, want %d covering them all", tc.name, W, p.Groups, tc.want)
		}
	}
	in := combine.Expect(W, P, bytes)
	in.PartitionBytes = make([]int64, P)
	for p := range in.PartitionBytes {
		in.PartitionBytes[p] = bytes / P
	}
	p, err := combine.MakePlan(*in, combine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Groups) != 1 {
		t.Errorf("the plan of the sealed stage has %d groups, want 1: the test's stage is no longer one task's", len(p.Groups))
	}
}

// TestCombineOverlapTaskOverCap: an overlapped plan's buckets come from
// the engine's estimate; a task that meets more bytes than the task cap
// (partitions more skewed, or a stage larger, than expected) fails
// naming the task, its bytes and the cap, rather than hold them all.
func TestCombineOverlapTaskOverCap(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const W, P, rows, blob = 2, 4, 20, 8000
	const limit = 256 << 10
	s, err := e.c.Combine(ctx, "cap", 0, combine.Options{Groups: 2, Buckets: 1, TaskCapBytes: limit, Expected: combine.Expect(W, P, 64<<10)})
	if err != nil {
		t.Fatal(err)
	}
	if err := commitWorker(t, e, "cap", 0, P, rows, blob); err != nil {
		t.Fatal(err)
	}
	_, err = s.RunTask(ctx, 0)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than the task cap of %d bytes", limit)) || !strings.Contains(err.Error(), "combine task 0 (group 0, bucket 0)") {
		t.Fatalf("task of %d bytes over a %d-byte cap: %v, want an error naming the task and the cap", P*rows*blob, limit, err)
	}
}

// TestCombineOverlapGroupRecordDamaged: a group record that does not
// parse, or that is another group's, is refused as corrupt by a process
// that loads it, naming the key and what it holds against what the plan
// wants.
func TestCombineOverlapGroupRecordDamaged(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const W, P, rows, blob = 4, 4, 10, 100
	o := combine.Options{Groups: 2, Buckets: 1, Expected: combine.Expect(W, P, W*P*rows*blob)}
	s, err := e.c.Combine(ctx, "grp", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	for w := range W {
		if err := commitWorker(t, e, "grp", w, P, rows, blob); err != nil {
			t.Fatal(err)
		}
	}
	for g := range 2 {
		if _, err := s.FormGroup(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	dir := e.c.Layout().ObjectKey("grp", 0, manifest.PlanDir(s.Plan().ID))
	g0, g1 := dir+"group-0.json", dir+"group-1.json"
	for _, c := range []struct {
		name string
		body []byte
		says string
	}{
		{"not json", []byte("{not json"), g0 + " is not a group record"},
		{"another group's", getBytes(t, e, g1), fmt.Sprintf("%s is group 1 of plan %s with 2 workers, want group 0 of plan %s with 2", g0, s.Plan().ID, s.Plan().ID)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := e.st.Put(ctx, g0, c.body, store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			other, err := e.c.Combine(ctx, "grp", 0, o)
			if err != nil {
				t.Fatal(err)
			}
			_, err = other.FormGroup(ctx, 0, nil)
			if !errors.Is(err, manifest.ErrCorrupt) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("group 0's record %s: %v, want ErrCorrupt saying %q", c.name, err, c.says)
			}
		})
	}
}

// attemptOf is worker w's committed attempt in query's stage 0.
func attemptOf(t *testing.T, e *env, query, w string) string {
	t.Helper()
	m, err := manifest.LoadWorker(context.Background(), e.st, e.c.Layout(), query, 0, w)
	if err != nil {
		t.Fatal(err)
	}
	return m.Attempt
}
