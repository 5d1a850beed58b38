package sidecar_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestHostileCombine: the combine action as a hostile client drives it.
// Malformed and impossible requests are refused with InvalidArgument or
// FailedPrecondition naming what is wrong; a combine cancelled at any
// point (from before its plan to its seal) ends with its call, leaves no
// multipart upload open, and the stage reads back row for row as before;
// after all of it a combine completes, the stage still reads back
// unchanged, and the server takes and serves the next put.
func TestHostileCombine(t *testing.T) {
	forEveryBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{})
		ctx := context.Background()
		const query = "q-combine"
		for _, w := range []string{"0", "1", "2"} {
			putRows(t, e, query, w, 6, 2)
		}
		if _, err := e.sc.Seal(ctx, query, 0, 3); err != nil {
			t.Fatal(err)
		}
		var before [][]row
		for p := range 2 {
			_, got, err := doGet(ctx, e.fc, map[string]any{"query": query, "stage": 0, "partition": p})
			if err != nil || len(got) == 0 {
				t.Fatalf("partition %d before combining: %d rows, %v", p, len(got), err)
			}
			before = append(before, got)
		}

		for _, c := range []struct {
			name      string
			body      any
			code      codes.Code
			fragments []string
		}{
			{"not an object", "combine everything", codes.InvalidArgument, []string{"combine body is not valid"}},
			{"unknown field", map[string]any{"query": query, "stage": 0, "everything": true}, codes.InvalidArgument, []string{"combine body is not valid", "everything"}},
			{"no stage", map[string]any{"query": query}, codes.InvalidArgument, []string{"no stage"}},
			{"query escapes", map[string]any{"query": "../other", "stage": 0}, codes.InvalidArgument, []string{"query"}},
			{"negative groups", map[string]any{"query": query, "stage": 0, "groups": -1}, codes.InvalidArgument, []string{"groups and buckets must be at least 1"}},
			{"more buckets than partitions", map[string]any{"query": query, "stage": 0, "buckets": 1 << 30}, codes.InvalidArgument, []string{"at most 2 buckets"}},
			{"more groups than workers", map[string]any{"query": query, "stage": 0, "groups": 1 << 30}, codes.InvalidArgument, []string{"groups"}},
			{"parallel past the limit", map[string]any{"query": query, "stage": 0, "parallel": 100000}, codes.InvalidArgument, []string{"parallel must be between 1 and 64"}},
			{"negative task", map[string]any{"query": query, "stage": 0, "task": -1}, codes.InvalidArgument, []string{"task must be at least 0"}},
			{"task outside the plan", map[string]any{"query": query, "stage": 0, "groups": 3, "buckets": 2, "task": 6}, codes.InvalidArgument, []string{"task 6 outside the plan's 6 tasks"}},
			{"stage not sealed", map[string]any{"query": "q-nothing", "stage": 0}, codes.FailedPrecondition, []string{"seal the stage first"}},
			{"seal with no task run", map[string]any{"query": query, "stage": 0, "groups": 3, "buckets": 2, "seal": true}, codes.FailedPrecondition, []string{"6 of 6 tasks have no manifest"}},
		} {
			err := doAction(ctx, e.fc, flightclient.ActionCombine, c.body, nil)
			t.Run(c.name, func(t *testing.T) { wantCode(t, err, c.code, c.fragments...) })
		}

		// Cancelled at every point: before the call goes out, during its
		// plan, tasks and seal. A cancel that comes after the seal finds
		// the stage combined; either way it reads back the same.
		for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond, 150 * time.Millisecond} {
			cctx, cancel := context.WithCancel(ctx)
			if after == 0 {
				cancel()
			} else {
				time.AfterFunc(after, cancel)
			}
			_, err := e.sc.Combine(cctx, flightclient.CombineRequest{Query: query, Stage: 0, Groups: 3, Buckets: 2, Parallel: 2})
			cancel()
			if c := status.Code(err); err != nil && c != codes.Canceled && c != codes.DeadlineExceeded {
				t.Fatalf("combine cancelled after %v: %v (code %v), want Canceled or success", after, err, c)
			}
			noOpenUploads(t, e, query)
			readsBack(t, e, query, before)
		}

		r, err := e.sc.Combine(ctx, flightclient.CombineRequest{Query: query, Stage: 0, Groups: 3, Buckets: 2, Parallel: 2})
		if err != nil || !r.Combined || r.Rows != int64(len(before[0])+len(before[1])) {
			t.Fatalf("combine after the hostile calls: %+v, %v", r, err)
		}
		noOpenUploads(t, e, query)
		readsBack(t, e, query, before)
		e.servesNormally(ctx, "q-after-combine")
	})
}

// noOpenUploads polls up to 10 s (a cancelled task aborts on a detached
// context) until no multipart upload is open under query.
func noOpenUploads(t *testing.T, e *env, query string) {
	t.Helper()
	prefix := e.client.Layout().QueryPrefix(query)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ups, err := e.raw.ListUploads(context.Background(), prefix)
		if err == nil && len(ups) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var keys []string
			for _, u := range ups {
				keys = append(keys, u.Key)
			}
			t.Fatalf("uploads still open under %s: %s (%v)", prefix, strings.Join(keys, ", "), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
