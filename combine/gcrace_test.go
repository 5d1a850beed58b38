package combine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/gchold"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// hookStore runs before the put of the combined level's manifest, and
// after it (or, afterPublish, after the put of the stage manifest), once;
// answer, if set, is the error the combined level's put returns once
// stored, once (its answer lost).
type hookStore struct {
	store.Store
	before, after func()
	afterPublish  bool
	answer        error
}

func (s *hookStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	combined := strings.HasSuffix(key, "/"+combine.CombinedName)
	if combined && s.before != nil {
		s.before()
		s.before = nil
	}
	err := s.Store.Put(ctx, key, body, o)
	if s.after != nil && (combined && !s.afterPublish || s.afterPublish && strings.HasSuffix(key, "/manifest.json")) {
		s.after()
		s.after = nil
	}
	if combined && err == nil && s.answer != nil {
		err, s.answer = s.answer, nil
	}
	return err
}

// TestCombineSealLostAnswer: a combined level's put that lands and is
// answered with an error (a lost answer, or the 412 its retry meets) is
// this seal's own commit: the seal publishes it, its index stays, and
// the stage reads combined with every row.
func TestCombineSealLostAnswer(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	for i, answer := range []error{
		&store.Error{Op: "PutObject", Status: 412, Code: "PreconditionFailed", Err: store.ErrPreconditionFailed},
		&store.Error{Op: "PutObject", Status: 500, Code: "InternalError", Retryable: true},
	} {
		t.Run(fmt.Sprint(answer), func(t *testing.T) {
			query := fmt.Sprintf("lost%d", i)
			writeStage(t, e, query, 4, 4, 20, 1000)
			want, _ := readEach(t, e, query, 4)
			hs := &hookStore{Store: e.st, answer: answer}
			s, err := combine.Open(ctx, hs, e.c.Layout(), query, 0, combine.Options{Groups: 2, Buckets: 2})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.RunAll(ctx, 2); err != nil {
				t.Fatal(err)
			}
			sealed, err := s.Seal(ctx)
			if hs.answer != nil {
				t.Fatal("the combined level's put was never made")
			}
			if errors.Is(answer, store.ErrPreconditionFailed) && err != nil {
				t.Fatalf("seal whose own put landed: %v", err)
			}
			if err != nil {
				// A transient answer is an unknown outcome: a seal run
				// again learns it.
				if sealed, err = s.Seal(ctx); err != nil {
					t.Fatalf("seal again after a lost answer: %v", err)
				}
			}
			m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), query, 0)
			if err != nil || !combine.IsCombined(m) || m.Index.Key != sealed.Index.Key {
				t.Fatalf("the stage manifest: combined %v, %v", combine.IsCombined(m), err)
			}
			if _, err := e.st.GetRange(ctx, e.c.Layout().ObjectKey(query, 0, m.Index.Key), 0, 1); err != nil {
				t.Fatalf("the index the combined level names: %v", err)
			}
			readsAs(t, e, query, want, "combined")
		})
	}
}

// TestCombineSealRacesGC: a gc that finds a plan's keys older than
// --older-than runs while the plan's seal commits. A gc that deletes
// everything just before the seal's put leaves the seal nothing to
// publish: it fails naming the tasks gc deleted and leaves no
// combined.json; the stage reads its first level as before, and running
// the tasks again and sealing combines it. A gc that planned before the
// put and applies after it (before the seal's check, or after its
// publish) finds the level at combined.json when it goes to hold it,
// deletes nothing of the plan and says so: the combined level reads
// whole.
func TestCombineSealRacesGC(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	gco := gc.Options{OlderThan: time.Hour, ResultsRetention: 24 * time.Hour, Now: later}
	for i, at := range []string{"before the put", "planned before the put, applied after", "planned before the put, applied after the publish"} {
		t.Run(at, func(t *testing.T) {
			query := []string{"a", "b", "c"}[i]
			writeStage(t, e, query, 4, 4, 20, 1000)
			want, _ := readEach(t, e, query, 4)
			o := combine.Options{Groups: 2, Buckets: 2}
			hs := &hookStore{Store: e.st}
			var gcErr error
			var report gc.Report
			switch i {
			case 0:
				hs.before = func() { report, gcErr = gc.Run(ctx, e.st, e.c.Layout(), gco) }
			case 1, 2:
				hs.afterPublish = i == 2
				var p *gc.Plan
				hs.before = func() { p, gcErr = gc.NewPlan(ctx, e.st, e.c.Layout(), gco) }
				hs.after = func() {
					if gcErr == nil {
						report, gcErr = p.Apply(ctx, e.st)
					}
				}
			}
			err := runAndSeal(t, hs, e, query, o)
			if gcErr != nil {
				t.Fatal(gcErr)
			}
			mine := 0
			for _, o := range report.Orphans {
				if strings.HasPrefix(o.Key, e.c.Layout().StagePrefix(query, 0)) {
					mine++
				}
			}
			if i > 0 {
				if err != nil {
					t.Fatalf("seal whose level gc found committed: %v", err)
				}
				if mine != 0 {
					t.Errorf("gc deleted %d keys of a plan whose level was at %s", mine, combine.CombinedName)
				}
				ckey := e.c.Layout().StagePrefix(query, 0) + combine.CombinedName
				if !slices.ContainsFunc(report.Skipped, func(s string) bool { return strings.HasPrefix(s, ckey+": committed") }) {
					t.Fatalf("gc's report does not say it found %s committed: %q", ckey, report.Skipped)
				}
				readsAs(t, e, query, want, "combined, gc after")
				return
			}
			if mine == 0 {
				t.Fatalf("gc deleted nothing of the plan; the race was not run")
			}
			if !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "were deleted (by gc") {
				t.Fatalf("seal racing gc: %v, want ErrMissingTasks naming the tasks gc deleted", err)
			}
			withdrawn(t, e, query, want)
			// Run again: the same plan, its tasks written anew, sealed.
			if err := runAndSeal(t, e.st, e, query, o); err != nil {
				t.Fatal(err)
			}
			readsAs(t, e, query, want, "combined after the race")
		})
	}
}

// TestCombineSealGCAndRerun: between the seal's read of the task
// manifests and its put, gc deletes the plan's keys (older than
// --older-than) and the tasks run again, committing manifests of the
// same names that name new objects. The seal sees that the manifests
// there are not the ones it read, withdraws, and fails naming the tasks,
// rather than publish a level naming the objects gc deleted; the stage
// reads its first level, and a seal run again combines the new run.
func TestCombineSealGCAndRerun(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	gco := gc.Options{OlderThan: time.Hour, ResultsRetention: 24 * time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}
	const query = "rerun"
	writeStage(t, e, query, 4, 4, 20, 1000)
	want, _ := readEach(t, e, query, 4)
	o := combine.Options{Groups: 2, Buckets: 2}
	hs := &hookStore{Store: e.st}
	var hookErr error
	var report gc.Report
	hs.before = func() {
		if report, hookErr = gc.Run(ctx, e.st, e.c.Layout(), gco); hookErr != nil {
			return
		}
		time.Sleep(1100 * time.Millisecond) // manifests written again get another time
		again, err := combine.Open(ctx, e.st, e.c.Layout(), query, 0, o)
		if err != nil {
			hookErr = err
			return
		}
		_, hookErr = again.RunAll(ctx, 2)
	}
	err := runAndSeal(t, hs, e, query, o)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if len(report.Orphans) == 0 {
		t.Fatal("gc deleted nothing of the plan; the race was not run")
	}
	if !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "written again") {
		t.Fatalf("seal whose task manifests gc deleted and a rerun wrote again: %v, want ErrMissingTasks", err)
	}
	withdrawn(t, e, query, want)
	s, err := combine.Open(ctx, e.st, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx); err != nil {
		t.Fatalf("seal of the tasks run again: %v", err)
	}
	readsAs(t, e, query, want, "combined from the rerun")
}

// hooked calls put before each Put and get after each GetRange; either
// may answer in the store's place with an error.
type hooked struct {
	store.Store
	put func(key string) error
	get func(key string)
}

func (s *hooked) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	if s.put != nil {
		if err := s.put(key); err != nil {
			return err
		}
	}
	return s.Store.Put(ctx, key, body, o)
}

func (s *hooked) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := s.Store.GetRange(ctx, key, off, n)
	if s.get != nil {
		s.get(key)
	}
	return rc, err
}

// TestCombineSealFindsLevelWithdrawn: a seal finds combined.json
// committed by another seal that has not yet published it, and then
// finds it gone (that seal withdrew it): it fails, rather than report a
// level the stage manifest does not name.
func TestCombineSealFindsLevelWithdrawn(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const query = "withdrawn"
	writeStage(t, e, query, 4, 4, 20, 1000)
	o := combine.Options{Groups: 2, Buckets: 2}
	ckey := e.c.Layout().StagePrefix(query, 0) + combine.CombinedName
	// The first seal commits combined.json and stops before publishing.
	first := &hooked{Store: e.st, put: func(key string) error {
		if strings.HasSuffix(key, "/manifest.json") {
			return &store.Error{Op: "PutObject", Key: key, Status: 403, Code: "AccessDenied"}
		}
		return nil
	}}
	if err := runAndSeal(t, first, e, query, o); err == nil {
		t.Fatal("seal whose publish was refused: nil error")
	}
	// The second finds it, and it is withdrawn before it looks again.
	gets := 0
	second := &hooked{Store: e.st, get: func(key string) {
		if key == ckey {
			if gets++; gets == 1 {
				if err := e.st.Delete(ctx, ckey); err != nil {
					t.Error(err)
				}
			}
		}
	}}
	s, err := combine.Open(ctx, second, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Seal(ctx)
	if !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "withdrawn") {
		t.Fatalf("seal of a level withdrawn under it: %v, want ErrMissingTasks saying it was withdrawn", err)
	}
	if m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), query, 0); err != nil || combine.IsCombined(m) {
		t.Fatalf("the stage manifest: combined %v, %v", combine.IsCombined(m), err)
	}
}

// withdrawn checks that a seal that lost its race left no combined.json
// and the stage manifest at the first level, whose partitions read as
// want.
func withdrawn(t *testing.T, e *env, query string, want []partitionDigest) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.st.GetRange(ctx, e.c.Layout().StagePrefix(query, 0)+combine.CombinedName, 0, -1); !store.IsNotFound(err) {
		t.Fatalf("%s left after a withdrawn seal: %v", combine.CombinedName, err)
	}
	if m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), query, 0); err != nil || combine.IsCombined(m) {
		t.Fatalf("the stage manifest after a withdrawn seal: combined %v, %v", combine.IsCombined(m), err)
	}
	readsAs(t, e, query, want, "after the race")
}

// runAndSeal opens query's stage 0 through st with o, runs every task
// and returns the seal's error.
func runAndSeal(t *testing.T, st store.Store, e *env, query string, o combine.Options) error {
	t.Helper()
	ctx := context.Background()
	s, err := combine.Open(ctx, st, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	_, err = s.Seal(ctx)
	return err
}

// raceStore runs one party's hooks of a race, each once, for the first
// key with a given suffix: beforePut before its Put, afterPut after it,
// afterGet once its body is read (the caller gets what was there),
// afterDelete after its Delete, afterList after a LIST of a prefix with
// that suffix; listErr, if set, answers every LIST in the store's place
// when it returns an error.
type raceStore struct {
	store.Store
	mu                                                    sync.Mutex
	beforePut, afterPut, afterGet, afterDelete, afterList map[string]func()
	listErr                                               func(prefix string) error
}

func (s *raceStore) hook(m map[string]func(), key string) {
	s.mu.Lock()
	var f func()
	for suffix, g := range m {
		if strings.HasSuffix(key, suffix) {
			f = g
			delete(m, suffix)
			break
		}
	}
	s.mu.Unlock()
	if f != nil {
		f()
	}
}

func (s *raceStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	s.hook(s.beforePut, key)
	err := s.Store.Put(ctx, key, body, o)
	s.hook(s.afterPut, key)
	return err
}

func (s *raceStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := s.Store.GetRange(ctx, key, off, n)
	if err == nil && s.afterGet != nil {
		b, rerr := io.ReadAll(rc)
		rc.Close()
		if rerr != nil {
			return nil, rerr
		}
		rc = io.NopCloser(bytes.NewReader(b))
	}
	s.hook(s.afterGet, key)
	return rc, err
}

func (s *raceStore) Delete(ctx context.Context, keys ...string) error {
	err := s.Store.Delete(ctx, keys...)
	for _, k := range keys {
		s.hook(s.afterDelete, k)
	}
	return err
}

func (s *raceStore) List(ctx context.Context, prefix, delim string) ([]store.ObjectInfo, []string, error) {
	if s.listErr != nil {
		if err := s.listErr(prefix); err != nil {
			return nil, nil, err
		}
	}
	objs, dirs, err := s.Store.List(ctx, prefix, delim)
	s.hook(s.afterList, prefix)
	return objs, dirs, err
}

// publishedWhole checks that query's stage manifest is combined, names
// no missing object, and reads as want.
func publishedWhole(t *testing.T, e *env, query string, want []partitionDigest) {
	t.Helper()
	ctx := context.Background()
	m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), query, 0)
	if err != nil || !combine.IsCombined(m) {
		t.Fatalf("the stage manifest: combined %v, %v", combine.IsCombined(m), err)
	}
	keys := []string{m.Index.Key}
	for _, w := range m.Workers {
		for _, obj := range w.Objects {
			keys = append(keys, obj.Key)
		}
	}
	for _, k := range keys {
		if _, err := e.st.GetRange(ctx, e.c.Layout().ObjectKey(query, 0, k), 0, 1); err != nil {
			t.Errorf("%s, which the published level names: %v", k, err)
		}
	}
	readsAs(t, e, query, want, "combined")
}

// TestCombineTwoSealsRaceGC: two seals of one plan, and a gc that found
// the plan older than --older-than before either committed. The first
// seal commits combined.json and pauses; the second finds the level,
// checks the task manifests and pauses before it publishes; then gc
// applies, and the first seal goes on once gc has deleted something (or
// once gc is done). Whatever gc does, no stage manifest may name an
// object gc deleted: gc finds the level at combined.json when it goes to
// hold it and deletes nothing of the plan, and both seals publish the
// same level, which reads whole.
func TestCombineTwoSealsRaceGC(t *testing.T) {
	ctx := context.Background()
	const query = "twoseals"
	e, want := raceEnv(t, query)
	o := combine.Options{Groups: 2, Buckets: 2}
	gco := gc.Options{OlderThan: time.Hour, ResultsRetention: 24 * time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}

	var plan *gc.Plan
	var planErr error
	committed, resumeFirst, firstDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var resumeOnce sync.Once
	resume := func() { resumeOnce.Do(func() { close(resumeFirst) }) }
	first := &raceStore{Store: e.st,
		beforePut: map[string]func(){"/" + combine.CombinedName: func() { plan, planErr = gc.NewPlan(ctx, e.st, e.c.Layout(), gco) }},
		afterPut:  map[string]func(){"/" + combine.CombinedName: func() { close(committed); <-resumeFirst }}}
	s1, err := combine.Open(ctx, first, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var firstErr error
	go func() {
		defer close(firstDone)
		_, firstErr = s1.Seal(ctx)
	}()
	<-committed
	if planErr != nil {
		t.Fatal(planErr)
	}

	ready, resumeSecond, secondDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	second := &raceStore{Store: e.st, beforePut: map[string]func(){"/manifest.json": func() { close(ready); <-resumeSecond }}}
	var secondErr error
	go func() {
		defer close(secondDone)
		s2, err := combine.Open(ctx, second, e.c.Layout(), query, 0, o)
		if err == nil {
			_, err = s2.Seal(ctx)
		}
		secondErr = err
	}()
	select {
	case <-ready:
	case <-secondDone:
		t.Fatalf("the second seal ended before it published: %v", secondErr)
	}

	gcStore := &raceStore{Store: e.st, afterDelete: map[string]func(){"": func() { resume(); <-firstDone }}}
	report, err := plan.Apply(ctx, gcStore)
	if err != nil {
		t.Fatal(err)
	}
	resume()
	<-firstDone
	close(resumeSecond)
	<-secondDone

	for _, o := range report.Orphans {
		if strings.HasPrefix(o.Key, e.c.Layout().StagePrefix(query, 0)) || strings.Contains(o.Key, "/"+query+"/") {
			t.Errorf("gc deleted %s of a plan whose level was at %s", o.Key, combine.CombinedName)
		}
	}
	if firstErr != nil || secondErr != nil {
		t.Fatalf("seals: %v; %v", firstErr, secondErr)
	}
	publishedWhole(t, e, query, want)
}

// TestCombineSealsAgree: a seal finishing a level another seal committed
// checks the task manifests against the level's record of them, as the
// committing seal does: a task manifest written again after the level
// was built (same bytes, a later time) makes it fail and withdraw the
// level rather than publish what the committing seal would withdraw.
func TestCombineSealsAgree(t *testing.T) {
	ctx := context.Background()
	const query = "agree"
	e, want := raceEnv(t, query)
	o := combine.Options{Groups: 2, Buckets: 2}
	first := &hooked{Store: e.st, put: func(key string) error {
		if strings.HasSuffix(key, "/manifest.json") {
			return &store.Error{Op: "PutObject", Key: key, Status: 403, Code: "AccessDenied"}
		}
		return nil
	}}
	s, err := combine.Open(ctx, first, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx); err == nil {
		t.Fatal("seal whose publish was refused: nil error")
	}
	key := e.c.Layout().ObjectKey(query, 0, manifest.TaskManifestName(s.Plan().ID, 1))
	b := getBytes(t, e, key)
	time.Sleep(1100 * time.Millisecond) // a later time, whole seconds on some stores
	if err := e.st.Put(ctx, key, b, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	again, err := combine.Open(ctx, e.st, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Seal(ctx); !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "written again") {
		t.Fatalf("seal of a level whose task manifest was written again: %v, want ErrMissingTasks", err)
	}
	withdrawn(t, e, query, want)
}

// TestCombineSealMeetsHoldAtPut: gc takes combined.json between a seal's
// look at it and its put: the put is refused, and the seal fails naming
// gc's hold, deletes its index and leaves the hold alone.
func TestCombineSealMeetsHoldAtPut(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const query = "heldatput"
	writeStage(t, e, query, 4, 4, 20, 1000)
	ckey := e.c.Layout().StagePrefix(query, 0) + combine.CombinedName
	_, hold := gchold.New([]string{"0123456789abcdef"}, time.Now())
	hs := &hookStore{Store: e.st, before: func() {
		if err := e.st.Put(context.Background(), ckey, hold, store.PutOptions{IfNoneMatch: true}); err != nil {
			t.Error(err)
		}
	}}
	o := combine.Options{Groups: 2, Buckets: 2}
	err := runAndSeal(t, hs, e, query, o)
	if !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "held by gc") {
		t.Fatalf("seal whose put met gc's hold: %v, want ErrMissingTasks naming the hold", err)
	}
	if got := getBytes(t, e, ckey); !bytes.Equal(got, hold) {
		t.Fatalf("%s is %q after the seal, want gc's hold", ckey, got)
	}
	s, err := combine.Open(ctx, e.st, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	noIndexLeft(t, e, query, s.Plan().ID, "seal that did not commit")
}

// TestCombineSealCheckFails: a seal that finds the level committed by
// another and cannot check the task manifests (its LIST fails, or it is
// cancelled after the other published) fails and leaves the level as
// it is: the other seal's publish stands and the stage reads whole.
func TestCombineSealCheckFails(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	o := combine.Options{Groups: 2, Buckets: 2}
	for i, how := range []string{"list fails", "cancelled after the publish"} {
		t.Run(how, func(t *testing.T) {
			query := []string{"listfails", "cancelled"}[i]
			writeStage(t, e, query, 4, 4, 20, 1000)
			want, _ := readEach(t, e, query, 4)
			var secondErr error
			committed, publish, firstDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
			first := &raceStore{Store: e.st, afterPut: map[string]func(){"/" + combine.CombinedName: func() { close(committed) }},
				beforePut: map[string]func(){"/manifest.json": func() { <-publish }}}
			s1, err := combine.Open(ctx, first, e.c.Layout(), query, 0, o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s1.RunAll(ctx, 2); err != nil {
				t.Fatal(err)
			}
			var firstErr error
			go func() {
				defer close(firstDone)
				_, firstErr = s1.Seal(ctx)
			}()
			<-committed
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			second := &raceStore{Store: e.st}
			if i == 0 {
				second.listErr = func(prefix string) error {
					return &store.Error{Op: "ListObjectsV2", Key: prefix, Status: 503, Code: "SlowDown", Retryable: true}
				}
			} else {
				second.afterGet = map[string]func(){"/manifest.json": func() { close(publish); <-firstDone; cancel() }}
				second.listErr = func(string) error { return sctx.Err() }
			}
			s2, err := combine.Open(sctx, second, e.c.Layout(), query, 0, o)
			if err == nil {
				_, secondErr = s2.Seal(sctx)
			}
			if i == 0 {
				close(publish)
			}
			<-firstDone
			if firstErr != nil {
				t.Fatal(firstErr)
			}
			if secondErr == nil || !strings.Contains(secondErr.Error(), "stays") {
				t.Fatalf("a seal that could not check: %v, want the LIST's error saying the level stays", secondErr)
			}
			publishedWhole(t, e, query, want)
		})
	}
}

// TestCombineSealFindsLevelGoneAfterCheck: a seal finishing a level
// another committed checks the task manifests and then finds
// combined.json gone (withdrawn, or removed by a delete that raced it):
// it fails rather than publish a level it could not check while it
// stood.
func TestCombineSealFindsLevelGoneAfterCheck(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const query = "goneaftercheck"
	writeStage(t, e, query, 4, 4, 20, 1000)
	o := combine.Options{Groups: 2, Buckets: 2}
	ckey := e.c.Layout().StagePrefix(query, 0) + combine.CombinedName
	first := &hooked{Store: e.st, put: func(key string) error {
		if strings.HasSuffix(key, "/manifest.json") {
			return &store.Error{Op: "PutObject", Key: key, Status: 403, Code: "AccessDenied"}
		}
		return nil
	}}
	if err := runAndSeal(t, first, e, query, o); err == nil {
		t.Fatal("seal whose publish was refused: nil error")
	}
	second := &raceStore{Store: e.st, afterList: map[string]func(){"/": func() {
		if err := e.st.Delete(ctx, ckey); err != nil {
			t.Error(err)
		}
	}}}
	s, err := combine.Open(ctx, second, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx); !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "withdrawn") {
		t.Fatalf("seal of a level gone after its check: %v, want ErrMissingTasks saying it was withdrawn", err)
	}
	if m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), query, 0); err != nil || combine.IsCombined(m) {
		t.Fatalf("the stage manifest: combined %v, %v", combine.IsCombined(m), err)
	}
}

// TestCombineWithdrawLeavesHold: a seal withdrawing its level finds
// gc's hold at combined.json instead (the level was withdrawn by another
// seal, and gc took the key): it deletes its index and leaves the hold.
func TestCombineWithdrawLeavesHold(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const query = "withdrawhold"
	writeStage(t, e, query, 4, 4, 20, 1000)
	o := combine.Options{Groups: 2, Buckets: 2}
	ckey := e.c.Layout().StagePrefix(query, 0) + combine.CombinedName
	_, hold := gchold.New([]string{"0123456789abcdef"}, time.Now())
	var planID string
	st := &raceStore{Store: e.st, afterPut: map[string]func(){"/" + combine.CombinedName: func() {
		task := e.c.Layout().ObjectKey(query, 0, manifest.TaskManifestName(planID, 0))
		if err := e.st.Delete(ctx, task, ckey); err != nil {
			t.Error(err)
		}
		if err := e.st.Put(ctx, ckey, hold, store.PutOptions{IfNoneMatch: true}); err != nil {
			t.Error(err)
		}
	}}}
	s, err := combine.Open(ctx, st, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	planID = s.Plan().ID
	if _, err := s.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx); !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "were deleted") {
		t.Fatalf("seal whose task manifest went: %v, want ErrMissingTasks", err)
	}
	if got := getBytes(t, e, ckey); !bytes.Equal(got, hold) {
		t.Fatalf("%s is %q after the seal withdrew, want gc's hold", ckey, got)
	}
	noIndexLeft(t, e, query, planID, "withdrawn seal")
}

// TestCombineTwoGCsUnderStaleHold: two gcs find the same stale hold (a
// killed gc's) over a plan left over. The first works under it, deletes
// the plan and removes the hold; a seal of the plan then fails naming
// the tasks gone; the second, which read the hold before all that, goes
// on under it and deletes nothing the stage manifest names. The stage
// reads its first level, and combines again.
func TestCombineTwoGCsUnderStaleHold(t *testing.T) {
	ctx := context.Background()
	const query = "twogcs"
	e, want := raceEnv(t, query)
	o := combine.Options{Groups: 2, Buckets: 2}
	s0, err := combine.Open(ctx, e.st, e.c.Layout(), query, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s0.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	ckey := e.c.Layout().StagePrefix(query, 0) + combine.CombinedName
	_, stale := gchold.New([]string{s0.Plan().ID}, time.Now())
	if err := e.st.Put(ctx, ckey, stale, store.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	gco := gc.Options{OlderThan: time.Hour, ResultsRetention: 24 * time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}
	p1, err := gc.NewPlan(ctx, e.st, e.c.Layout(), gco)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := gc.NewPlan(ctx, e.st, e.c.Layout(), gco)
	if err != nil {
		t.Fatal(err)
	}
	read, resume, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var err2 error
	g2 := &raceStore{Store: e.st, afterGet: map[string]func(){ckey: func() { close(read); <-resume }}}
	go func() {
		defer close(done)
		_, err2 = p2.Apply(ctx, g2)
	}()
	<-read
	var sealErr error
	g1 := &raceStore{Store: e.st, afterDelete: map[string]func(){ckey: func() {
		s, err := combine.Open(ctx, e.st, e.c.Layout(), query, 0, o)
		if err == nil {
			_, sealErr = s.Seal(ctx)
		}
		close(resume)
		<-done
	}}}
	if _, err := p1.Apply(ctx, g1); err != nil {
		t.Fatal(err)
	}
	if err2 != nil {
		t.Fatal(err2)
	}
	if !errors.Is(sealErr, combine.ErrMissingTasks) {
		t.Fatalf("a seal of the plan gc deleted: %v, want ErrMissingTasks", sealErr)
	}
	withdrawn(t, e, query, want)
	if err := runAndSeal(t, e.st, e, query, o); err != nil {
		t.Fatal(err)
	}
	publishedWhole(t, e, query, want)
}

// readsAs checks that query's stage 0 reads, partition by partition, as
// want (what says which read).
func readsAs(t *testing.T, e *env, query string, want []partitionDigest, what string) {
	t.Helper()
	got, _ := readEach(t, e, query, len(want))
	for p := range want {
		if got[p] != want[p] {
			t.Errorf("partition %d %s: %d rows, want %d", p, what, got[p].Rows, want[p].Rows)
		}
	}
}

// noIndexLeft checks that no index is left in query's plan folder by a
// seal (what) that did not commit.
func noIndexLeft(t *testing.T, e *env, query, planID, what string) {
	t.Helper()
	objs, _, err := e.st.List(context.Background(), e.c.Layout().ObjectKey(query, 0, manifest.PlanDir(planID)), "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if strings.Contains(o.Key, "/index-") {
			t.Errorf("index %s left by a %s", o.Key, what)
		}
	}
}

// raceEnv is a fresh embedded env holding query's stage 0 of 4 workers x
// 4 partitions, sealed, and how each partition reads.
func raceEnv(t *testing.T, query string) (*env, []partitionDigest) {
	t.Helper()
	e := newEnv(t, testenv.Embedded(t))
	writeStage(t, e, query, 4, 4, 20, 1000)
	want, _ := readEach(t, e, query, 4)
	return e, want
}
