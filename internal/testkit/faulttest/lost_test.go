package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestLostAnswers cuts short half the answers to CreateMultipartUpload or
// to CompleteMultipartUpload: the server acted and the client never
// heard. A 200 whose body breaks is retried; a retried Complete that meets
// NoSuchUpload finds the finished object and succeeds; a retried Create
// aborts the upload whose answer was lost. Every worker commits and reads
// back whole, and no multipart upload is left behind. Were a writer to
// fail anyway, it must fail safe: no manifest and none of its objects.
func TestLostAnswers(t *testing.T) {
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) {
		for _, op := range []string{"CreateMultipartUpload", "CompleteMultipartUpload"} {
			t.Run(op, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				// With half the answers cut, a request gives up after all
				// its attempts once in 2^attempts: 16 attempts make a
				// worker that never hears back once in 65,536, where the
				// default 8 failed one of eight workers once in 32 runs.
				cfg := baseConfig()
				cfg.Store.RetryMaxAttempts = 16
				env := newEnv(t, e, cfg, faultproxy.Spec{Truncate: 0.5, Seed: 1, Ops: []string{op}})
				// Eight multipart objects: with half the answers cut, the chance
				// that none of their Completes is cut is 1 in 256.
				s := stage{query: "lost-" + op, workers: 8, partitions: 8, rows: 800_000, seed: 9, attempt: "a"}
				digests, errs := s.writeWorkers(ctx, env.client)
				l := env.client.Layout()
				var committed []string
				var kept [][]demo.Digest
				for w, err := range errs {
					id := fmt.Sprint(w)
					if err == nil {
						committed = append(committed, id)
						kept = append(kept, digests[w])
						continue
					}
					t.Logf("worker %s failed: %.200s...", id, err)
					if _, err := manifest.LoadWorker(ctx, env.direct, l, s.query, 0, id); !store.IsNotFound(err) {
						t.Errorf("worker %s failed but its manifest is readable (err %v)", id, err)
					}
					objs, _, err := env.direct.List(ctx, l.AttemptPrefix(s.query, 0, id, s.attempt), "")
					if err != nil {
						t.Fatal(err)
					}
					for _, o := range objs {
						t.Errorf("worker %s failed but left %s (%d bytes)", id, o.Key, o.Size)
					}
				}
				if len(committed) > 0 {
					if _, err := manifest.Seal(ctx, env.direct, l, s.query, 0, committed); err != nil {
						t.Fatal(err)
					}
					st, err := env.client.OpenStage(ctx, s.query, 0)
					if err != nil {
						t.Fatal(err)
					}
					got, err := s.readStage(ctx, st)
					if err != nil {
						t.Fatal(err)
					}
					if want := merge(kept); lost(want, got) != 0 {
						t.Errorf("committed workers %v: wrote %v, read %v", committed, want, got)
					}
				}
				ups, err := env.direct.ListUploads(ctx, l.StagePrefix(s.query, 0))
				if err != nil {
					t.Fatal(err)
				}
				cut := env.faults().Injected[faultproxy.Injection{Op: op, Fault: faultproxy.FaultTruncate}]
				if cut == 0 {
					t.Fatalf("no %s answer was cut short: the test proves nothing", op)
				}
				if len(committed) != s.workers {
					t.Errorf("%d of %d workers committed after %d lost %s answers", len(committed), s.workers, cut, op)
				}
				if len(ups) > 0 {
					t.Errorf("%d multipart uploads left open after %d lost %s answers", len(ups), cut, op)
				}
				t.Logf("%d lost %s answers: %d of %d workers committed, %d uploads orphaned; retries %s",
					cut, op, len(committed), s.workers, len(ups), formatRetries(env.counter.Retries()))
			})
		}
	})
}
