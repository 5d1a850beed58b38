package manifest

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/testkit/leaktest"
	"github.com/durashuffle/durashuffle/store"
)

// buggyStore is a store with a bug in its GETs of one key, once armed:
// GetRange itself panics (inGet) or its body's first Read does, for the
// whole object (a manifest's head; head) or for a range of it (entries).
type buggyStore struct {
	*store.Mem
	bad   string
	inGet bool
	head  bool
	armed atomic.Bool
}

func (s *buggyStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if !s.armed.Load() || key != s.bad || s.head != (n < 0) {
		return s.Mem.GetRange(ctx, key, off, n)
	}
	if s.inGet {
		panic("a bug in GetRange")
	}
	body, err := s.Mem.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	return panicBody{body}, nil
}

type panicBody struct{ io.ReadCloser }

func (panicBody) Read([]byte) (int, error) { panic("a bug in Read") }

// keys lists every object and open multipart upload under prefix.
func keys(t *testing.T, st *store.Mem, prefix string) []string {
	t.Helper()
	objs, _, err := st.List(context.Background(), prefix, "")
	if err != nil {
		t.Fatal(err)
	}
	ups, err := st.ListUploads(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	for _, u := range ups {
		out = append(out, "upload of "+u.Key)
	}
	slices.Sort(out)
	return out
}

// TestPanicFailsTheSeal: a panic in one of Seal's GETs, of a worker
// manifest's head or of a block's entries, fails the seal with a
// *safe.PanicError naming the object and the panic. Nothing is written
// (no index, no stage manifest, no upload), no goroutine is left behind,
// and the next seal of the stage succeeds.
func TestPanicFailsTheSeal(t *testing.T) {
	for _, tc := range []struct {
		name        string
		inGet, head bool
		want        string
	}{
		{"a head's GET", true, true, "panic in read of the manifest head t/q/stage-0/worker-2/manifest"},
		{"a head's body", false, true, "panic in read of the manifest head t/q/stage-0/worker-2/manifest"},
		{"a block's entries", false, false, "seal q stage 0: partitions [0, 5): panic in read of t/q/stage-0/worker-2/manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := &store.Mem{}
			ids := synthStage(t, mem, testLayout, "q", 4, 5, 3)
			prefix := testLayout.StagePrefix("q", 0)
			before := keys(t, mem, prefix)
			st := &buggyStore{Mem: mem, bad: testLayout.WorkerManifestKey("q", 0, "2"), inGet: tc.inGet, head: tc.head}
			st.armed.Store(true)
			base := runtime.NumGoroutine()

			s, err := Seal(ctx, st, testLayout, "q", 0, ids)
			var pe *safe.PanicError
			if s != nil || !errors.As(err, &pe) || len(pe.Stack) == 0 {
				t.Fatalf("Seal = %v, %v; want a PanicError with its stack", s, err)
			}
			t.Logf("Seal: %v", err)
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "a bug in") || !strings.Contains(pe.At, "panic_test.go:") {
				t.Errorf("Seal: %v, want it to contain %q, the panic and its site", err, tc.want)
			}
			leaktest.Settled(t, base)
			if after := keys(t, mem, prefix); !slices.Equal(after, before) {
				t.Errorf("the failed seal left %v, want only the worker manifests %v", after, before)
			}
			if _, err := LoadStageManifest(ctx, mem, testLayout, "q", 0); !store.IsNotFound(err) {
				t.Errorf("stage manifest after the failed seal: %v, want none", err)
			}

			st.armed.Store(false)
			if s, err := Seal(ctx, st, testLayout, "q", 0, ids); err != nil || !s.Sealed {
				t.Fatalf("the next seal: %v", err)
			}
		})
	}
}

// TestPanicFailsLoadStage: a panic while loading one of an unsealed
// stage's worker manifests fails LoadStage with a *safe.PanicError; the
// other loads stop and no goroutine is left behind.
func TestPanicFailsLoadStage(t *testing.T) {
	ctx := context.Background()
	mem := &store.Mem{}
	synthStage(t, mem, testLayout, "q", 4, 5, 3)
	st := &buggyStore{Mem: mem, bad: testLayout.WorkerManifestKey("q", 0, "1"), head: true}
	st.armed.Store(true)
	base := runtime.NumGoroutine()
	s, err := LoadStage(ctx, st, testLayout, "q", 0)
	if s != nil || !safe.IsPanic(err) || !strings.Contains(err.Error(), "panic in load of the manifest of worker 1 of q stage 0: a bug in Read") {
		t.Fatalf("LoadStage = %v, %v; want the panic of worker 1's manifest", s, err)
	}
	leaktest.Settled(t, base)
	st.armed.Store(false)
	if s, err := LoadStage(ctx, st, testLayout, "q", 0); err != nil || len(s.Workers) != 4 {
		t.Fatalf("the next LoadStage: %v", err)
	}
}
