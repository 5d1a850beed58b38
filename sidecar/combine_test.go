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
			writeWorkers(t, e, "cq", 0, 3, 4, 50)
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
			wantCode(t, err, codes.InvalidArgument, "task, seal, plan and group are mutually exclusive")

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

// writeWorkers commits workers [lo, hi) of a stage of P partitions,
// rows rows in each.
func writeWorkers(t *testing.T, e *env, query string, lo, hi, P, rows int) {
	t.Helper()
	ctx := context.Background()
	for w := lo; w < hi; w++ {
		wr, err := e.client.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Stage: 0, Worker: fmt.Sprint(w), Partitions: P})
		if err != nil {
			t.Fatal(err)
		}
		for p := range P {
			rec, _ := genBatch(fmt.Sprint(w), int32(p), rows, 64)
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
}

// TestCombineActionOverlap: on every backend, the combine action plans
// a stage while it is written (expect_workers, expect_partitions), runs
// a task of the first group once its workers have committed, refuses a
// group whose workers have not (FailedPrecondition), and after the
// first level's seal runs the rest and seals; DoGet serves the rows it
// served as written. seal-stage with combine combines a stage whose plan
// pays, and tells, with the plan's figures, that it did not combine one
// whose plan does not.
func TestCombineActionOverlap(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b.Start(t), envOptions{})
			ctx := context.Background()
			req := flightclient.CombineRequest{Query: "oq", Stage: 0, Groups: 2, Buckets: 2, ExpectWorkers: 4, ExpectPartitions: 4, ExpectBytes: 1 << 20}
			writeWorkers(t, e, "oq", 0, 2, 4, 50)
			zero, one := 0, 1
			r := req
			r.Task = &zero
			if res, err := e.sc.Combine(ctx, r); err != nil || res.Wrote != 1 {
				t.Fatalf("task 0 with group 0 committed: %+v %v", res, err)
			}
			r = req
			r.Group = &one
			_, err := e.sc.Combine(ctx, r)
			wantCode(t, err, codes.FailedPrecondition, "group 1 needs 2 more workers to commit")
			writeWorkers(t, e, "oq", 2, 4, 4, 50)
			if res, err := e.sc.Combine(ctx, r); err != nil || strings.Join(res.GroupWorkers, ",") != "2,3" {
				t.Fatalf("group 1: %+v %v", res, err)
			}
			if _, err := e.sc.Seal(ctx, "oq", 0, 4); err != nil {
				t.Fatal(err)
			}
			_, want, err := doGet(ctx, e.fc, flightclient.Ticket{Query: "oq", Stage: 0})
			if err != nil || len(want) != 800 {
				t.Fatalf("read as written: %d rows, %v", len(want), err)
			}
			all, err := e.sc.Combine(ctx, req)
			if err != nil || all.Wrote != 3 || !all.Combined || all.Rows != 800 {
				t.Fatalf("combine the rest: %+v %v", all, err)
			}
			_, got, err := doGet(ctx, e.fc, flightclient.Ticket{Query: "oq", Stage: 0})
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("read combined: %d rows (want %d, the same in order): %v", len(got), len(want), err)
			}

			// seal-stage with combine: 3 x 4 does not pay, 16 x 16 does.
			var small, large flightclient.SealResult
			writeWorkers(t, e, "small", 0, 3, 4, 10)
			if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": "small", "stage": 0, "workers": 3, "combine": true}, &small); err != nil {
				t.Fatal(err)
			}
			if !small.Sealed || small.Combined || small.Plan == "" || small.Predicted == nil || small.Predicted.Pays || small.Predicted.DirectGETs != 4*(2+3) {
				t.Fatalf("seal-stage combine of 3 x 4: %+v %+v", small, small.Predicted)
			}
			writeWorkers(t, e, "large", 0, 16, 16, 4)
			if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": "large", "stage": 0, "workers": 16, "combine": true, "parallel": 2}, &large); err != nil {
				t.Fatal(err)
			}
			if !large.Sealed || !large.Combined || large.Predicted == nil || !large.Predicted.Pays || large.Rows != 16*16*4 {
				t.Fatalf("seal-stage combine of 16 x 16: %+v %+v", large, large.Predicted)
			}
			err = doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": "small", "stage": 0, "workers": 3, "parallel": 2}, nil)
			wantCode(t, err, codes.InvalidArgument, "goes with combine")
		})
	}
}
