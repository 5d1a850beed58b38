package sidecar_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestCombineAction: on every backend, the combine action plans (and
// writes nothing), runs one task, refuses a seal naming the tasks
// missing, then runs the rest and seals; DoGet, whose cached stage the
// seal dropped, then serves the same rows in the same order from the
// combined objects.
func TestCombineAction(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b.Start(t), envOptions{})
			ctx := context.Background()
			var want []row
			for w := range 3 {
				wr, err := e.client.NewWriter(ctx, durashuffle.WriterOptions{Query: "cq", Stage: 0, Worker: fmt.Sprint(w), Partitions: 4})
				if err != nil {
					t.Fatal(err)
				}
				for p := range 4 {
					rec, _ := genBatch(fmt.Sprint(w), int32(p), 50, 64)
					err := wr.Write(p, rec)
					rec.Release()
					if err != nil {
						t.Fatal(err)
					}
				}
				if _, err := wr.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.sc.Seal(ctx, "cq", 0, 3); err != nil {
				t.Fatal(err)
			}
			_, want, err := doGet(ctx, e.fc, flightclient.Ticket{Query: "cq", Stage: 0})
			if err != nil || len(want) != 600 {
				t.Fatalf("read before combining: %d rows, %v", len(want), err)
			}

			plan, err := e.sc.Combine(ctx, flightclient.CombineRequest{Query: "cq", Stage: 0, Groups: 3, Buckets: 2, Plan: true})
			if err != nil {
				t.Fatal(err)
			}
			if plan.Tasks != 6 || plan.Groups != 3 || plan.Buckets != 2 || plan.Sealed || plan.Combined || plan.Predicted == nil ||
				plan.Predicted.DirectGETs != 4*(2+3) {
				t.Fatalf("plan: %+v %+v", plan, plan.Predicted)
			}
			one := 5
			r, err := e.sc.Combine(ctx, flightclient.CombineRequest{Query: "cq", Stage: 0, Groups: 3, Buckets: 2, Task: &one})
			if err != nil || r.Wrote != 1 || r.Rows != 100 {
				t.Fatalf("task 5: %+v %v", r, err)
			}
			_, err = e.sc.Combine(ctx, flightclient.CombineRequest{Query: "cq", Stage: 0, Groups: 3, Buckets: 2, Seal: true})
			wantCode(t, err, codes.FailedPrecondition, "5 of 6 tasks have no manifest", "task 0 (group 0, bucket 0")
			_, err = e.sc.Combine(ctx, flightclient.CombineRequest{Query: "cq", Stage: 0, Buckets: 5})
			wantCode(t, err, codes.InvalidArgument, "5 buckets and 0 groups asked for; at most 4 buckets")
			err = doAction(ctx, e.fc, flightclient.ActionCombine, map[string]any{"query": "cq", "stage": 0, "seal": true, "plan": true}, nil)
			wantCode(t, err, codes.InvalidArgument, "task, seal and plan are mutually exclusive")

			all, err := e.sc.Combine(ctx, flightclient.CombineRequest{Query: "cq", Stage: 0, Groups: 3, Buckets: 2, Parallel: 2})
			if err != nil || all.Wrote != 5 || !all.Sealed || !all.Combined || all.Rows != 600 {
				t.Fatalf("combine: %+v %v", all, err)
			}
			// With the writers' data objects gone, only the combined
			// level can serve the stage.
			objs, _, err := e.raw.List(ctx, e.client.Layout().StagePrefix("cq", 0), "")
			if err != nil {
				t.Fatal(err)
			}
			var data []string
			for _, o := range objs {
				if strings.Contains(o.Key, "/attempt-") {
					data = append(data, o.Key)
				}
			}
			if len(data) != 3 {
				t.Fatalf("writer objects %v, want 3", data)
			}
			if err := e.raw.Delete(ctx, data...); err != nil {
				t.Fatal(err)
			}
			_, got, err := doGet(ctx, e.fc, flightclient.Ticket{Query: "cq", Stage: 0})
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("read after combining: %d rows (want %d, the same in order): %v", len(got), len(want), err)
			}
			// The seal action run again (an engine retrying its seal
			// task) answers with the combined stage: its 6 tasks, the
			// same rows, and the stage still reads the same.
			again, err := e.sc.Seal(ctx, "cq", 0, 3)
			if err != nil || !again.Sealed || again.Workers != 6 || again.Rows != 600 {
				t.Fatalf("seal again after combining: %+v %v", again, err)
			}
			_, got, err = doGet(ctx, e.fc, flightclient.Ticket{Query: "cq", Stage: 0})
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("read after sealing again: %d rows (want %d, the same in order): %v", len(got), len(want), err)
			}
		})
	}
}
