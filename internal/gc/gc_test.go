package gc_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var backends = testenv.Backends()

// recStore records the keys of every Delete call, in order.
type recStore struct {
	store.Store
	mu      sync.Mutex
	deletes [][]string
}

func (r *recStore) Delete(ctx context.Context, keys ...string) error {
	r.mu.Lock()
	r.deletes = append(r.deletes, slices.Clone(keys))
	r.mu.Unlock()
	return r.Store.Delete(ctx, keys...)
}

// calls returns the Delete calls so far and forgets them.
func (r *recStore) calls() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.deletes
	r.deletes = nil
	return out
}

var schema = arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)

func batch(lo, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := lo; i < lo+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
	}
	return b.NewRecordBatch()
}

// commit writes n rows starting at lo as one worker's output.
func commit(t *testing.T, c *durashuffle.Client, query string, stage int, worker string, results bool, lo, n int) *manifest.Worker {
	t.Helper()
	w, err := c.NewWriter(context.Background(), durashuffle.WriterOptions{Query: query, Stage: stage, Worker: worker, Partitions: 2, Results: results})
	if err != nil {
		t.Fatal(err)
	}
	for p := range 2 {
		rec := batch(lo+p*n/2, n/2)
		err := w.Write(p, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Commit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rows reads a whole stage back.
func rows(t *testing.T, c *durashuffle.Client, query string, stage int) (int64, error) {
	t.Helper()
	st, err := c.OpenStage(context.Background(), query, stage)
	if err != nil {
		return 0, err
	}
	recs, err := st.ReadPartitions(context.Background(), nil)
	if err != nil {
		return 0, err
	}
	defer recs.Release()
	var n int64
	for recs.Next() {
		n += recs.RecordBatch().NumRows()
	}
	return n, recs.Err()
}

func keysOf(t *testing.T, st store.Store, prefix string) []string {
	t.Helper()
	objs, _, err := st.List(context.Background(), prefix, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func uploadKeys(t *testing.T, st store.Store) []string {
	t.Helper()
	ups, err := st.ListUploads(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range ups {
		out = append(out, u.Key)
	}
	slices.Sort(out)
	return out
}

// indexOf is the index of the Delete call holding key, -1 if none.
func indexOf(calls [][]string, key string) int {
	for i, c := range calls {
		if slices.Contains(c, key) {
			return i
		}
	}
	return -1
}

// TestRun drives gc over a bucket holding everything it must tell apart,
// with an injected clock: committed intermediate and results stages
// (sealed and not), a crashed attempt's data object, an open multipart
// upload, a worker manifest that does not decode, keys under the prefix
// that are not the layout's, and a sibling prefix "durashuffle-other/"
// shaped exactly like ours.
func TestRun(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ep := b.Start(t)
			raw, _ := ep.NewStore(t)
			rec := &recStore{Store: raw}
			cfg := durashuffle.DefaultConfig()
			cfg.Store.RetryBaseDelay = durashuffle.Duration(10 * time.Millisecond)
			c := testenv.Client(t, cfg, durashuffle.WithStore(raw))
			defer c.Close()
			l := c.Layout()

			commit(t, c, "q1", 0, "0", false, 0, 100)
			commit(t, c, "q1", 0, "1", false, 100, 100)
			if _, err := c.Seal(ctx, "q1", 0, 2); err != nil {
				t.Fatal(err)
			}
			commit(t, c, "q1", 1, "0", true, 0, 10) // results, sealed
			if _, err := c.Seal(ctx, "q1", 1, 1); err != nil {
				t.Fatal(err)
			}
			commit(t, c, "q2", 0, "0", true, 0, 20) // results, unsealed
			commit(t, c, "q2", 0, "1", true, 20, 20)

			put := func(key, body string) {
				t.Helper()
				if err := raw.Put(ctx, key, []byte(body), store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// A crashed attempt of q1/0 worker 0: data, no manifest.
			orphan := l.AttemptPrefix("q1", 0, "0", "crashed") + "data-0.arrows"
			put(orphan, "orphaned frame bytes")
			// An abandoned upload of q1/0 worker 1 and one in the sibling prefix.
			dead := l.AttemptPrefix("q1", 0, "1", "dead") + "data-0.arrows"
			sibling := "durashuffle-other/q1/stage-0/worker-1/attempt-dead/data-0.arrows"
			for _, k := range []string{dead, sibling} {
				if _, err := raw.CreateMultipart(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			// A worker whose manifest does not decode: its data stays.
			put(l.WorkerManifestKey("q3", 0, "0"), "{not json")
			undecided := l.AttemptPrefix("q3", 0, "0", "a") + "data-0.arrows"
			put(undecided, "who knows")
			// Keys gc must never touch.
			foreign := []string{
				"durashuffle/README.txt",
				"durashuffle/q1/stage-0/worker-0/attempt-x/notes.bin",
				"durashuffle-other/q1/stage-0/worker-0/attempt-a/data-0.arrows",
				"durashuffle-other/q1/stage-1/manifest.json",
				"outside.txt",
			}
			for _, k := range foreign {
				put(k, "not durashuffle's")
			}
			all := keysOf(t, raw, "")

			start := time.Now()
			run := func(o gc.Options) gc.Report {
				t.Helper()
				r, err := gc.Run(ctx, rec, l, o)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			at := func(d time.Duration) func() time.Time { return func() time.Time { return start.Add(d) } }

			// Everything is younger than an hour: nothing to do.
			r := run(gc.Options{OlderThan: time.Hour, ResultsRetention: 6 * time.Hour, Now: at(0)})
			if r.Totals != (gc.Totals{}) || len(rec.calls()) != 0 {
				t.Fatalf("young bucket: %+v", r.Totals)
			}
			if r.Scanned.Stages != 4 || r.Scanned.Foreign != 2 || r.Scanned.Uploads != 1 {
				t.Fatalf("scanned %+v: want 4 stages, 2 foreign keys under the prefix, 1 upload", r.Scanned)
			}
			if len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0], "worker-0/manifest.json") || !strings.Contains(r.Skipped[0], "not JSON") {
				t.Fatalf("skipped %q", r.Skipped)
			}

			// Two hours on, dry run: it would abort our upload and delete the
			// orphan, and does neither.
			p, err := gc.NewPlan(ctx, rec, l, gc.Options{OlderThan: time.Hour, ResultsRetention: 6 * time.Hour, Now: at(2 * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			r = p.Report()
			if r.Totals.UploadsAborted != 1 || r.Totals.OrphanObjects != 1 || r.Totals.OrphanBytes != int64(len("orphaned frame bytes")) || r.Totals.StagesDeleted != 0 {
				t.Fatalf("dry run: %+v", r.Totals)
			}
			if r.Uploads[0].Key != dead || r.Orphans[0].Key != orphan || !r.DryRun {
				t.Fatalf("dry run report: %+v", r)
			}
			if got := keysOf(t, raw, ""); !slices.Equal(got, all) || len(rec.calls()) != 0 {
				t.Fatalf("dry run changed the bucket: %v", got)
			}
			if ups := uploadKeys(t, raw); len(ups) != 2 {
				t.Fatalf("dry run aborted uploads: %v", ups)
			}

			// For real.
			r = run(gc.Options{OlderThan: time.Hour, ResultsRetention: 6 * time.Hour, Now: at(2 * time.Hour)})
			if r.Totals.UploadsAborted != 1 || r.Totals.OrphanObjects != 1 || r.Totals.ObjectsDeleted != 1 || r.Totals.StagesDeleted != 0 {
				t.Fatalf("gc at +2h: %+v", r.Totals)
			}
			if ups := uploadKeys(t, raw); !slices.Equal(ups, []string{sibling}) {
				t.Fatalf("uploads after gc: %v, want only the sibling prefix's", ups)
			}
			if got := keysOf(t, raw, ""); slices.Contains(got, orphan) || !slices.Contains(got, undecided) || len(got) != len(all)-1 {
				t.Fatalf("after gc at +2h: %v", got)
			}
			for _, s := range []struct {
				q    string
				n    int
				rows int64
			}{{"q1", 0, 200}, {"q1", 1, 10}, {"q2", 0, 40}} {
				if n, err := rows(t, c, s.q, s.n); err != nil || n != s.rows {
					t.Fatalf("%s stage %d after gc: %d rows, %v", s.q, s.n, n, err)
				}
			}

			// Seven hours on: both results stages are past retention and go
			// whole, manifests first; the intermediate stage stays.
			rec.calls()
			r = run(gc.Options{OlderThan: time.Hour, ResultsRetention: 6 * time.Hour, Now: at(7 * time.Hour)})
			if r.Totals.StagesDeleted != 2 || r.Totals.UploadsAborted != 0 || r.Totals.OrphanObjects != 0 {
				t.Fatalf("gc at +7h: %+v", r.Totals)
			}
			want := []gc.Stage{
				{Query: "q1", Stage: 1, Results: true, Sealed: true, Manifests: 3, Objects: 1}, // stage manifest, its index, a worker manifest,
				{Query: "q2", Stage: 0, Results: true, Sealed: false, Manifests: 2, Objects: 2},
			}
			for i, s := range r.Stages {
				s.Bytes, s.CommittedAt = 0, time.Time{}
				if s != want[i] {
					t.Fatalf("deleted stage %d: %+v, want %+v", i, s, want[i])
				}
			}
			if r.Totals.ObjectsDeleted != 8 {
				t.Fatalf("deleted %d objects, want 8 (4 + 4)", r.Totals.ObjectsDeleted)
			}
			calls := rec.calls()
			sm, wm := indexOf(calls, l.StageManifestKey("q1", 1)), indexOf(calls, l.WorkerManifestKey("q1", 1, "0"))
			m1, _ := manifest.LoadWorker(ctx, raw, l, "q1", 0, "0") // still there: an intermediate stage
			if m1 == nil {
				t.Fatal("intermediate stage's manifest is gone")
			}
			for _, k := range keysOf(t, raw, l.StagePrefix("q1", 1)) {
				t.Fatalf("left behind in the expired stage: %s", k)
			}
			for _, c := range calls {
				for _, k := range c {
					if strings.HasSuffix(k, ".arrows") {
						if idx := indexOf(calls, k); idx <= sm || idx <= wm {
							t.Fatalf("data %s deleted in call %d, before the manifests (calls %d, %d)", k, idx, sm, wm)
						}
					}
				}
			}
			if sm < 0 || wm <= sm {
				t.Fatalf("stage manifest deleted in call %d, worker manifest in %d: want stage first", sm, wm)
			}
			for _, s := range []struct {
				q string
				n int
			}{{"q1", 1}, {"q2", 0}} {
				if _, err := rows(t, c, s.q, s.n); !errors.Is(err, manifest.ErrStageNotFound) {
					t.Fatalf("%s stage %d after expiry: %v, want stage not found", s.q, s.n, err)
				}
			}
			if n, err := rows(t, c, "q1", 0); err != nil || n != 200 {
				t.Fatalf("intermediate stage after expiry: %d rows, %v", n, err)
			}

			// Idempotent: nothing left to do.
			if r := run(gc.Options{OlderThan: time.Hour, ResultsRetention: 6 * time.Hour, Now: at(7 * time.Hour)}); r.Totals != (gc.Totals{}) {
				t.Fatalf("second run: %+v", r.Totals)
			}

			// delete-query removes q1 whole, manifests first, and still
			// nothing outside the prefix.
			dr, err := gc.DeleteQuery(ctx, rec, l, "q1")
			if err != nil {
				t.Fatal(err)
			}
			if len(keysOf(t, raw, l.QueryPrefix("q1"))) != 0 {
				t.Fatalf("q1 keys left: %v", keysOf(t, raw, l.QueryPrefix("q1")))
			}
			// q1 held stage 0: stage manifest, its index, 2 worker
			// manifests, 2 data objects; and the foreign notes.bin under it.
			if dr.Totals.ObjectsDeleted != 7 || dr.Totals.StagesDeleted != 1 || dr.Stages[0].Manifests != 4 || dr.Stages[0].Objects != 2 {
				t.Fatalf("delete-query report: %+v %+v", dr.Totals, dr.Stages)
			}
			calls = rec.calls()
			if len(calls) != 3 || !strings.HasSuffix(calls[0][0], "stage-0/manifest.json") || len(calls[1]) != 2 || !strings.HasSuffix(calls[1][0], "/manifest.json") {
				t.Fatalf("delete-query calls %v: want stage manifest, worker manifests, then the rest", calls)
			}
			if _, err := rows(t, c, "q1", 0); !errors.Is(err, manifest.ErrStageNotFound) {
				t.Fatalf("q1 after delete-query: %v", err)
			}
			got := keysOf(t, raw, "")
			for _, k := range foreign {
				if strings.HasPrefix(k, "durashuffle/q1/") {
					continue // under the deleted query's own prefix
				}
				if !slices.Contains(got, k) {
					t.Fatalf("%s outside the layout was deleted", k)
				}
			}
			if ups := uploadKeys(t, raw); !slices.Equal(ups, []string{sibling}) {
				t.Fatalf("uploads: %v", ups)
			}
			// An invalid query is refused before any request.
			if _, err := gc.DeleteQuery(ctx, rec, l, "../durashuffle-other"); !errors.Is(err, manifest.ErrInvalidID) {
				t.Fatalf("delete-query of a bad ID: %v", err)
			}
		})
	}
}

// TestDeleteQueryAbortsUploads: open uploads under the query go too.
func TestDeleteQueryAbortsUploads(t *testing.T) {
	ctx := context.Background()
	raw, _ := testenv.MinIO(t).NewStore(t)
	l := manifest.Layout{Prefix: "durashuffle"}
	for _, k := range []string{
		l.AttemptPrefix("q", 0, "0", "a") + "data-0.arrows",
		l.AttemptPrefix("q", 3, "2", "b") + "data-1.arrows",
		l.AttemptPrefix("q-other", 0, "0", "a") + "data-0.arrows",
	} {
		if _, err := raw.CreateMultipart(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	r, err := gc.DeleteQuery(ctx, raw, l, "q")
	if err != nil {
		t.Fatal(err)
	}
	if r.Totals.UploadsAborted != 2 {
		t.Fatalf("aborted %d uploads, want 2", r.Totals.UploadsAborted)
	}
	if ups := uploadKeys(t, raw); len(ups) != 1 || !strings.Contains(ups[0], "/q-other/") {
		t.Fatalf("uploads left: %v, want only q-other's", ups)
	}
}

// TestLostSealIndex: the index a stage manifest names is kept; one no
// manifest names (a seal that crashed between its index and its
// manifest, or lost the race and could not delete it) is an orphan once
// old enough, and the stage still reads afterwards.
func TestLostSealIndex(t *testing.T) {
	ctx := context.Background()
	st := &store.Mem{}
	c := testenv.Client(t, durashuffle.DefaultConfig(), durashuffle.WithStore(st))
	defer c.Close()
	l := c.Layout()
	commit(t, c, "q", 0, "0", false, 0, 100)
	s, err := c.Seal(ctx, "q", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	named := l.ObjectKey("q", 0, s.Index.Key)
	lost := l.ObjectKey("q", 0, manifest.IndexName("20260101T000000-0123456789abcdef"))
	st.Set(lost, []byte("DSI2 of a seal that crashed"))
	r, err := gc.Run(ctx, st, l, gc.Options{OlderThan: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Orphans) != 1 || r.Orphans[0].Key != lost || r.Scanned.Foreign != 0 {
		t.Fatalf("orphans %+v (foreign %d), want only %s", r.Orphans, r.Scanned.Foreign, lost)
	}
	if _, ok := st.Bytes(named); !ok {
		t.Fatalf("gc deleted the stage's index %s", named)
	}
	if _, ok := st.Bytes(lost); ok {
		t.Fatalf("gc left the lost index %s", lost)
	}
	if n, err := rows(t, c, "q", 0); err != nil || n != 100 {
		t.Fatalf("stage reads %d rows after gc: %v", n, err)
	}
}

// TestRunRemovesStaleGuardProbes: a commit guard probe whose delete failed
// ({prefix}/~commit-guard/{id}) is removed once older than the cutoff,
// like an orphan; a fresh one and foreign keys are left alone.
func TestRunRemovesStaleGuardProbes(t *testing.T) {
	ctx := context.Background()
	st := &store.Mem{}
	l := manifest.Layout{Prefix: "durashuffle"}
	probe := l.GuardProbeKey("0123456789abcdef")
	foreign := []string{l.GuardProbeKey("not-a-probe"), l.Root() + "~commit-guardx/0123456789abcdef", "elsewhere/~commit-guard/0123456789abcdef"}
	for _, k := range append([]string{probe}, foreign...) {
		if err := st.Put(ctx, k, []byte("x"), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Younger than --older-than: kept.
	r, err := gc.Run(ctx, st, l, gc.Options{OlderThan: time.Hour})
	if err != nil || r.Totals.OrphanObjects != 0 {
		t.Fatalf("gc of a fresh probe: %+v, %v; want nothing removed", r.Totals, err)
	}
	r, err = gc.Run(ctx, st, l, gc.Options{OlderThan: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Totals.OrphanObjects != 1 || len(r.Orphans) != 1 || r.Orphans[0].Key != probe {
		t.Fatalf("gc of a stale probe: %+v %v; want the probe %s removed", r.Totals, r.Orphans, probe)
	}
	if _, ok := st.Bytes(probe); ok {
		t.Fatalf("the probe %s is still stored", probe)
	}
	for _, k := range foreign {
		if _, ok := st.Bytes(k); !ok {
			t.Errorf("gc removed %s, which is not a probe", k)
		}
	}
}

// TestRunRemovesStaleReadyzKeys: the folder the sidecar's readiness probe
// lists ({prefix}/~readyz/) should hold nothing, since every probe lists
// what is there; a key left in it is removed once older than the cutoff,
// as a stale guard probe is, and a fresh one and look-alikes outside it
// are left alone.
func TestRunRemovesStaleReadyzKeys(t *testing.T) {
	ctx := context.Background()
	st := &store.Mem{}
	l := manifest.Layout{Prefix: "durashuffle"}
	stale := []string{l.ReadyProbePrefix() + "left-behind", l.ReadyProbePrefix() + "a/b"}
	foreign := []string{l.Root() + "~readyzx/left-behind", "elsewhere/~readyz/left-behind", l.Root() + "readyz/left-behind"}
	for _, k := range append(append([]string{}, stale...), foreign...) {
		if err := st.Put(ctx, k, []byte("x"), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := gc.Run(ctx, st, l, gc.Options{OlderThan: time.Hour})
	if err != nil || r.Totals.OrphanObjects != 0 {
		t.Fatalf("gc of fresh keys: %+v, %v; want nothing removed", r.Totals, err)
	}
	r, err = gc.Run(ctx, st, l, gc.Options{OlderThan: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, o := range r.Orphans {
		removed = append(removed, o.Key)
	}
	slices.Sort(removed)
	if want := []string{stale[1], stale[0]}; !slices.Equal(removed, want) || r.Totals.OrphanObjects != 2 {
		t.Fatalf("gc of stale keys in %s: %+v, removed %v; want %v", l.ReadyProbePrefix(), r.Totals, removed, want)
	}
	for _, k := range stale {
		if _, ok := st.Bytes(k); ok {
			t.Errorf("%s is still stored", k)
		}
	}
	for _, k := range foreign {
		if _, ok := st.Bytes(k); !ok {
			t.Errorf("gc removed %s, which is outside %s", k, l.ReadyProbePrefix())
		}
	}
	// The probe's LIST finds the folder empty again.
	if objs, dirs, err := st.List(ctx, l.ReadyProbePrefix(), "/"); err != nil || len(objs)+len(dirs) != 0 {
		t.Errorf("List %s after gc: %v %v %v, want nothing", l.ReadyProbePrefix(), objs, dirs, err)
	}
}
