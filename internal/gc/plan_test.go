package gc

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestPlan says, for each kind of key, what the plan removes, on
// store.Mem: the plan alone (the dry run) touches nothing, and Apply
// removes what it said and nothing else.
func TestPlan(t *testing.T) {
	ctx := context.Background()
	l := manifest.Layout{Prefix: "p"}
	const write = "00000000000000ab"
	data := func(stage int, worker, attempt string, n int) string {
		return l.ObjectKey("q", stage, manifest.DataName(worker, attempt, write, n))
	}
	// commit writes a worker manifest of stage naming data object 0 of
	// attempt "a", and that object.
	commit := func(t *testing.T, st *store.Mem, stage int, worker string, results bool) {
		t.Helper()
		rel := manifest.DataName(worker, "a", write, 0)
		body := []byte("frame bytes")
		st.Set(l.ObjectKey("q", stage, rel), body)
		w := &manifest.Worker{
			Query: "q", Stage: stage, Worker: worker, Attempt: "a", Results: results,
			Compression: "lz4", Partitions: 1, ChunkSize: 8 << 20,
			Objects: []manifest.Object{{Key: rel, Size: int64(len(body)), Parts: 1, CRC32C: store.CRC32C(body)}},
			Frames:  []manifest.Frame{{Length: int64(len(body)), Rows: 1, Bytes: 8, CRC32C: store.CRC32C(body)}},
		}
		if _, err := manifest.Commit(ctx, st, l, w); err != nil {
			t.Fatal(err)
		}
	}
	upload := func(t *testing.T, st *store.Mem, key string) {
		t.Helper()
		if _, err := st.CreateMultipart(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		uploads, orphans []string
		stages           []Stage // Query, Stage, Manifests and Objects compared
		foreign, skipped int
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, st *store.Mem)
		age   time.Duration // Now is this long after the writes
		want  want
	}{
		{"committed data stays", func(t *testing.T, st *store.Mem) {
			commit(t, st, 1, "0", false)
		}, 2 * time.Hour, want{}},
		{"an orphan older than older-than goes", func(t *testing.T, st *store.Mem) {
			commit(t, st, 1, "0", false)
			st.Set(data(1, "0", "lost", 0), []byte("x"))
		}, 2 * time.Hour, want{orphans: []string{data(1, "0", "lost", 0)}}},
		{"a young orphan stays", func(t *testing.T, st *store.Mem) {
			commit(t, st, 1, "0", false)
			st.Set(data(1, "0", "lost", 0), []byte("x"))
		}, 0, want{}},
		{"an old upload is aborted, a foreign one left", func(t *testing.T, st *store.Mem) {
			upload(t, st, data(1, "0", "a", 0))
			upload(t, st, "p/elsewhere.bin")
		}, 2 * time.Hour, want{uploads: []string{data(1, "0", "a", 0)}, foreign: 1}},
		{"expired results go whole", func(t *testing.T, st *store.Mem) {
			commit(t, st, 3, "0", true)
			commit(t, st, 3, "1", true)
		}, 7 * time.Hour, want{stages: []Stage{{Query: "q", Stage: 3, Results: true, Manifests: 2, Objects: 2}}}},
		{"results within retention stay", func(t *testing.T, st *store.Mem) {
			commit(t, st, 3, "0", true)
		}, 2 * time.Hour, want{}},
		{"intermediate stages never expire", func(t *testing.T, st *store.Mem) {
			commit(t, st, 3, "0", false)
		}, 70 * time.Hour, want{}},
		{"foreign keys are left alone", func(t *testing.T, st *store.Mem) {
			st.Set("p/README", []byte("x"))
			st.Set("p/q/stage-01/manifest.json", []byte("x"))
			st.Set("p/q/stage-1/worker-0/attempt-a/data-0.arrows.tmp", []byte("x"))
			st.Set("other/q/stage-1/manifest.json", []byte("x"))
		}, 2 * time.Hour, want{foreign: 3}},
		{"a leftover guard probe goes", func(t *testing.T, st *store.Mem) {
			st.Set(l.GuardProbeKey("0123456789abcdef"), []byte("x"))
		}, 2 * time.Hour, want{orphans: []string{"p/~commit-guard/0123456789abcdef"}}},
		{"a worker whose manifest does not decode keeps its data", func(t *testing.T, st *store.Mem) {
			st.Set(l.WorkerManifestKey("q", 1, "0"), []byte("not a manifest"))
			st.Set(data(1, "0", "a", 0), []byte("x"))
		}, 2 * time.Hour, want{skipped: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := new(store.Mem)
			tc.setup(t, st)
			before := keys(t, st)
			all, err := st.ListUploads(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			uploads := len(all)
			now := time.Now().Add(tc.age)
			p, err := NewPlan(ctx, st, l, Options{OlderThan: time.Hour, ResultsRetention: 6 * time.Hour, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			r := p.Report()
			var got want
			for _, u := range r.Uploads {
				got.uploads = append(got.uploads, u.Key)
			}
			for _, o := range r.Orphans {
				got.orphans = append(got.orphans, o.Key)
			}
			for _, s := range r.Stages {
				got.stages = append(got.stages, Stage{Query: s.Query, Stage: s.Stage, Results: s.Results, Manifests: s.Manifests, Objects: s.Objects})
			}
			got.foreign, got.skipped = r.Scanned.Foreign, len(r.Skipped)
			if !slices.Equal(got.uploads, tc.want.uploads) || !slices.Equal(got.orphans, tc.want.orphans) ||
				!slices.Equal(got.stages, tc.want.stages) || got.foreign != tc.want.foreign || got.skipped != tc.want.skipped {
				t.Fatalf("plan %+v, want %+v", got, tc.want)
			}
			if !r.DryRun {
				t.Fatal("a plan's report is not a dry run")
			}
			if after := keys(t, st); !slices.Equal(after, before) {
				t.Fatalf("the plan changed the store: %v, was %v", after, before)
			}

			applied, err := p.Apply(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			if applied.DryRun || applied.Totals != r.Totals {
				t.Fatalf("applied %+v, planned %+v", applied.Totals, r.Totals)
			}
			if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != uploads-len(tc.want.uploads) {
				t.Fatalf("%d uploads left of %d (%v), want %d aborted", len(ups), uploads, err, len(tc.want.uploads))
			}
			left := keys(t, st)
			removed := len(before) - len(left)
			if removed != r.Totals.ObjectsDeleted {
				t.Fatalf("Apply removed %d objects, the plan said %d", removed, r.Totals.ObjectsDeleted)
			}
		})
	}
}

func keys(t *testing.T, st *store.Mem) []string {
	t.Helper()
	objs, _, err := st.List(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	slices.Sort(out)
	return out
}
