package combine_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// wholeSeconds lists every key at one whole second, as S3's listings
// give LastModified in whole seconds to workers that commit within one:
// commit order ties, broken by worker ID.
type wholeSeconds struct{ store.Store }

func (s wholeSeconds) List(ctx context.Context, prefix, delim string) ([]store.ObjectInfo, []string, error) {
	objs, dirs, err := s.Store.List(ctx, prefix, delim)
	for i := range objs {
		objs[i].LastModified = time.Unix(1_700_000_000, 0)
	}
	return objs, dirs, err
}

// TestCombineOverlapGroupFormedAnew: a process forms group 0 from the two
// workers committed so far and runs a task; the plan then idles past
// --older-than, gc deletes its keys, group records included, and another
// process forms group 0 anew from other workers. The first process runs
// group 0's other task from the members it kept. The combined level's
// totals match the first level's (workers of one size, uncompressed),
// yet it would hold one worker twice and another not at all: the seal
// refuses it, naming the task and its group, and the stage reads as
// written.
func TestCombineOverlapGroupFormedAnew(t *testing.T) {
	ep := testenv.Embedded(t)
	st, counter := ep.NewStore(t)
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket = ep.Bucket
	cfg.Write.Compression = "none"
	c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
	t.Cleanup(c.Close)
	e := &env{c: c, st: st, counter: counter}
	ctx := context.Background()
	const W, P, rows, blob = 4, 4, 10, 1000
	o := combine.Options{Groups: 2, Buckets: 2, Expected: combine.Expect(W, P, W*P*rows*blob)}
	for _, w := range []int{1, 3} {
		if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
			t.Fatal(err)
		}
	}
	a, err := combine.Open(ctx, wholeSeconds{e.st}, e.c.Layout(), "q", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunTask(ctx, 0); err != nil { // group 0, bucket 0
		t.Fatal(err)
	}
	if ids, err := a.FormGroup(ctx, 0, nil); err != nil || strings.Join(ids, ",") != "1,3" {
		t.Fatalf("group 0 formed first: %v, %v; want workers 1,3", ids, err)
	}
	for _, w := range []int{0, 2} {
		if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gc.Run(ctx, e.st, e.c.Layout(), gc.Options{OlderThan: time.Hour, ResultsRetention: 24 * time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunTask(ctx, 2); err != nil { // group 0, bucket 1, from a's members
		t.Fatal(err)
	}
	b, err := combine.Open(ctx, wholeSeconds{e.st}, e.c.Layout(), "q", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.FormGroup(ctx, 0, nil); err != nil || strings.Join(ids, ",") == "1,3" {
		t.Fatalf("group 0 formed anew: %v, %v; want other workers than 1,3", ids, err)
	}
	if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
		t.Fatal(err)
	}
	want, _ := readEach(t, e, "q", P)
	_, err = b.Seal(ctx)
	if !errors.Is(err, combine.ErrGroupConflict) || !strings.Contains(err.Error(), "task 2 (group 0, bucket 1) was made from other workers") {
		t.Fatalf("seal of tasks made from a group formed anew: %v, want ErrGroupConflict naming task 2", err)
	}
	if m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), "q", 0); err != nil || combine.IsCombined(m) {
		t.Fatalf("the stage manifest after a refused seal: combined %v, %v", combine.IsCombined(m), err)
	}
	got, _ := readEach(t, e, "q", P)
	for i := range want {
		if want[i] != got[i] {
			t.Errorf("partition %d: %d rows as written, %d after the refused seal", i, want[i].Rows, got[i].Rows)
		}
	}
}

// TestCombineOverlapNamedThenListed: the engine names group 1 from the
// order it saw workers commit; another process then forms group 0 from
// the listing, where the commit order ties. The listing leaves group 1's
// workers to it, the plan seals, and it reads as written.
func TestCombineOverlapNamedThenListed(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const W, P, rows, blob = 4, 4, 10, 1000
	o := combine.Options{Groups: 2, Buckets: 1, Expected: combine.Expect(W, P, W*P*rows*blob)}
	for _, w := range []int{2, 0, 3, 1} {
		if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
			t.Fatal(err)
		}
	}
	// A stray worker, not one of 0..3: never taken into a group, and
	// refused when named.
	stray, err := e.c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "stray", Partitions: P, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stray.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	engine, err := combine.Open(ctx, wholeSeconds{e.st}, e.c.Layout(), "q", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.FormGroup(ctx, 1, []string{"3", "stray"}); !errors.Is(err, combine.ErrInvalidPlan) || !strings.Contains(err.Error(), `worker "stray" is not one of the plan's workers 0..3`) {
		t.Fatalf("naming a stray worker: %v", err)
	}
	if _, err := engine.FormGroup(ctx, 1, []string{"3", "1"}); err != nil {
		t.Fatal(err)
	}
	other, err := combine.Open(ctx, wholeSeconds{e.st}, e.c.Layout(), "q", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if ids, err := other.FormGroup(ctx, 0, nil); err != nil || strings.Join(ids, ",") != "0,2" {
		t.Fatalf("group 0 from the listing: %v, %v; want workers 0,2", ids, err)
	}
	// The engine names group 0 as it saw it, in its order: the same group.
	if _, err := engine.FormGroup(ctx, 0, []string{"2", "0"}); err != nil {
		t.Fatalf("group 0 named in another order: %v", err)
	}
	if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
		t.Fatal(err)
	}
	want := rowsOf(t, e, "q", P)
	if _, err := other.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	// The groups hold the workers in commit order, not by ID: the same
	// rows, in another order.
	if got := rowsOf(t, e, "q", P); !maps.Equal(got, want) {
		t.Errorf("combined: %d rows, as written %d, or their bytes differ", len(got), len(want))
	}
}

// rowsOf reads query's stage 0 partition by partition: each row's blob
// digest by partition and id.
func rowsOf(t *testing.T, e *env, query string, P int) map[[2]int64][32]byte {
	t.Helper()
	out := map[[2]int64][32]byte{}
	s, err := e.c.OpenStage(context.Background(), query, 0)
	if err != nil {
		t.Fatal(err)
	}
	for p := range P {
		recs, err := s.ReadPartitions(context.Background(), []int{p})
		if err != nil {
			t.Fatal(err)
		}
		for recs.Next() {
			rec := recs.RecordBatch()
			ids, blobs := rec.Column(0).(*array.Int64), rec.Column(1).(*array.Binary)
			for i := range int(rec.NumRows()) {
				out[[2]int64{int64(p), ids.Value(i)}] = sha256.Sum256(blobs.Value(i))
			}
		}
		if err := recs.Err(); err != nil {
			t.Fatal(err)
		}
		recs.Close()
	}
	return out
}

// TestCombineOverlapNamedLosesRace: the engine names group 0 while
// another process forms it from the listing first: the engine gets
// ErrGroupConflict naming the workers that stand, not them as its own.
func TestCombineOverlapNamedLosesRace(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const W, P, rows, blob = 4, 4, 10, 1000
	o := combine.Options{Groups: 2, Buckets: 1, Expected: combine.Expect(W, P, W*P*rows*blob)}
	for w := range W {
		if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
			t.Fatal(err)
		}
	}
	other, err := combine.Open(ctx, e.st, e.c.Layout(), "q", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	var otherErr error
	first := &raceStore{Store: e.st, beforePut: map[string]func(){"/group-0.json": func() { _, otherErr = other.FormGroup(ctx, 0, nil) }}}
	engine, err := combine.Open(ctx, first, e.c.Layout(), "q", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := engine.FormGroup(ctx, 0, []string{"2", "3"})
	if otherErr != nil {
		t.Fatal(otherErr)
	}
	if !errors.Is(err, combine.ErrGroupConflict) || !strings.Contains(err.Error(), "was formed with workers 0,1") {
		t.Fatalf("naming group 0 after another process formed it: %v, %v; want ErrGroupConflict naming workers 0,1", ids, err)
	}
}

// TestCombineOverlapTaskWithoutGroupDigest: a task manifest written
// before tasks recorded their group record's digest (none) is checked as
// it was then, by the groups against the first level and the totals:
// the plan seals.
func TestCombineOverlapTaskWithoutGroupDigest(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	const W, P, rows, blob = 4, 4, 4, 1000
	o := combine.Options{Groups: 2, Buckets: 1, Expected: combine.Expect(W, P, W*P*rows*blob)}
	for w := range W {
		if err := commitWorker(t, e, "q", w, P, rows, blob); err != nil {
			t.Fatal(err)
		}
	}
	s, err := e.c.Combine(ctx, "q", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := s.RunAll(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Task 0 as it was written before: no group_sha256.
	w := *tasks[0].Manifest
	w.GroupSHA256 = ""
	enc, err := w.Encode()
	if err != nil {
		t.Fatal(err)
	}
	key := e.c.Layout().ObjectKey("q", 0, manifest.TaskManifestName(s.Plan().ID, 0))
	if err := e.st.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Put(ctx, key, enc, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Seal(ctx, "q", 0, W); err != nil {
		t.Fatal(err)
	}
	// Another process seals: the same plan ID.
	s2, err := e.c.Combine(ctx, "q", 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.RunAll(ctx, 2); err != nil { // the old task stands
		t.Fatal(err)
	}
	if _, err := s2.Seal(ctx); err != nil {
		t.Fatalf("seal with a task manifest without its group's digest: %v", err)
	}
}
