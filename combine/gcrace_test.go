package combine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/gc"
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
			got, _ := readEach(t, e, query, 4)
			for p := range want {
				if got[p] != want[p] {
					t.Errorf("partition %d combined: %d rows, want %d", p, got[p].Rows, want[p].Rows)
				}
			}
		})
	}
}

// TestCombineSealRacesGC: a gc that finds a plan's keys older than
// --older-than runs while the plan's seal commits. Whether gc deletes
// everything just before the seal's put, or plans before the put and
// deletes after it, the seal publishes nothing, fails naming the tasks
// gc deleted, and leaves no combined.json; the stage reads its first
// level as before, and running the tasks again and sealing combines it.
// A gc that plans before the put and deletes after the seal has
// published finds combined.json and deletes only the task manifests: the
// combined level reads whole.
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
			if len(report.Orphans) == 0 {
				t.Fatalf("gc deleted nothing of the plan; the race was not run")
			}
			if i == 2 {
				if err != nil {
					t.Fatalf("seal published before gc applied: %v", err)
				}
				mine := 0
				for _, o := range report.Orphans {
					if !strings.HasPrefix(o.Key, e.c.Layout().StagePrefix(query, 0)) {
						continue // the stages before
					}
					mine++
					if !strings.HasSuffix(o.Key, ".bin") || !strings.Contains(o.Key, "/task-") {
						t.Errorf("gc deleted %s of a plan whose seal had published", o.Key)
					}
				}
				if mine == 0 {
					t.Fatalf("gc deleted nothing of the plan; the race was not run")
				}
				got, _ := readEach(t, e, query, 4)
				for p := range want {
					if got[p] != want[p] {
						t.Errorf("partition %d combined, gc after: %d rows, want %d", p, got[p].Rows, want[p].Rows)
					}
				}
				return
			}
			if !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "were deleted (by gc") {
				t.Fatalf("seal racing gc: %v, want ErrMissingTasks naming the tasks gc deleted", err)
			}
			withdrawn(t, e, query, want)
			// Run again: the same plan, its tasks written anew, sealed.
			if err := runAndSeal(t, e.st, e, query, o); err != nil {
				t.Fatal(err)
			}
			got, _ := readEach(t, e, query, 4)
			for p := range want {
				if got[p] != want[p] {
					t.Errorf("partition %d combined after the race: %d rows, want %d", p, got[p].Rows, want[p].Rows)
				}
			}
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
	got, _ := readEach(t, e, query, 4)
	for p := range want {
		if got[p] != want[p] {
			t.Errorf("partition %d combined from the rerun: %d rows, want %d", p, got[p].Rows, want[p].Rows)
		}
	}
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
	got, _ := readEach(t, e, query, 4)
	for p := range want {
		if got[p] != want[p] {
			t.Errorf("partition %d after the race: %d rows, want %d", p, got[p].Rows, want[p].Rows)
		}
	}
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
