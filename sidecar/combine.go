package sidecar

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/manifest"
)

// maxCombineParallel bounds the tasks one combine action runs at once:
// each holds its input in memory or, with spill on, on disk (counted
// against spill_bytes).
const maxCombineParallel = 64

// combineStage runs the combine action: the plan, one task, the seal, or
// all of them. After a seal the stage's cached manifest is dropped, so
// that the next DoGet reads the combined level; streams already open
// finish on the level they opened.
func (s *Server) combineStage(ctx context.Context, body []byte) (*flightclient.CombineResult, error) {
	var req flightclient.CombineRequest
	if err := decodeStrict("combine body", body, &req); err != nil {
		return nil, err
	}
	if !hasKey(body, "stage") {
		return nil, invalidf("combine body has no stage")
	}
	if err := manifest.ValidateID("query", req.Query); err != nil {
		return nil, invalidf("combine: %v", err)
	}
	if err := manifest.ValidateStage(req.Stage); err != nil {
		return nil, invalidf("combine: %v", err)
	}
	modes := 0
	for _, on := range []bool{req.Task != nil, req.Seal, req.Plan, req.Group != nil} {
		if on {
			modes++
		}
	}
	switch {
	case modes > 1:
		return nil, invalidf("combine: task, seal, plan and group are mutually exclusive")
	case (req.ExpectWorkers != 0) != (req.ExpectPartitions != 0):
		return nil, invalidf("combine: expect_workers and expect_partitions go together, got %d and %d", req.ExpectWorkers, req.ExpectPartitions)
	case req.ExpectWorkers < 0 || req.ExpectPartitions < 0 || req.ExpectBytes < 0:
		return nil, invalidf("combine: expect_workers, expect_partitions and expect_bytes must be positive, got %d, %d and %d", req.ExpectWorkers, req.ExpectPartitions, req.ExpectBytes)
	case req.ExpectWorkers > manifest.MaxSealWorkers:
		return nil, invalidf("combine: expect_workers %d is over the %d workers one seal takes (MaxSealWorkers)", req.ExpectWorkers, manifest.MaxSealWorkers)
	case req.ExpectPartitions > manifest.MaxPartitions:
		return nil, invalidf("combine: expect_partitions %d is over the %d partitions a stage has at most", req.ExpectPartitions, manifest.MaxPartitions)
	case (req.Group != nil || len(req.GroupWorkers) > 0) && req.ExpectWorkers == 0:
		return nil, invalidf("combine: group and group_workers need expect_workers (a plan made while the stage is written)")
	case len(req.GroupWorkers) > 0 && req.Group == nil:
		return nil, invalidf("combine: group_workers needs group")
	case req.Group != nil && *req.Group < 0:
		return nil, invalidf("combine: group must be at least 0, got %d", *req.Group)
	case req.Groups < 0 || req.Buckets < 0:
		return nil, invalidf("combine: groups and buckets must be at least 1 (or absent), got %d and %d", req.Groups, req.Buckets)
	case req.Task != nil && *req.Task < 0:
		return nil, invalidf("combine: task must be at least 0, got %d", *req.Task)
	case req.Parallel < 0 || req.Parallel > maxCombineParallel:
		return nil, invalidf("combine: parallel must be between 1 and %d, got %d", maxCombineParallel, req.Parallel)
	}
	if req.Parallel == 0 {
		req.Parallel = 4
	}
	o := combine.Options{Groups: req.Groups, Buckets: req.Buckets}
	if req.ExpectWorkers > 0 {
		o.Expected = combine.Expect(req.ExpectWorkers, req.ExpectPartitions, req.ExpectBytes)
	}
	cs, err := s.c.Combine(ctx, req.Query, req.Stage, o)
	if err != nil {
		return nil, combineStatus(err)
	}
	res := &flightclient.CombineResult{Query: req.Query, Stage: req.Stage}
	if p := cs.Plan(); p != nil {
		res.Plan, res.Groups, res.Buckets, res.Tasks = p.ID, len(p.Groups), len(p.Buckets), p.Tasks()
		res.Predicted = prediction(p)
	}
	var tasks []*combine.Task
	switch {
	case req.Plan:
	case req.Group != nil:
		if res.GroupWorkers, err = cs.FormGroup(ctx, *req.Group, req.GroupWorkers); err != nil {
			return nil, combineStatus(err)
		}
	case req.Task != nil:
		t, err := cs.RunTask(ctx, *req.Task)
		if err != nil {
			return nil, combineStatus(err)
		}
		tasks = []*combine.Task{t}
	default:
		if !req.Seal {
			if tasks, err = cs.RunAll(ctx, req.Parallel); err != nil {
				return nil, combineStatus(err)
			}
		}
		if _, err := cs.Seal(ctx); err != nil {
			return nil, combineStatus(err)
		}
		res.Sealed = true
		s.stages.evict(req.Query, req.Stage)
	}
	for _, t := range tasks {
		if t.Wrote {
			res.Wrote++
		}
		res.Rows += t.Manifest.Totals.Rows
	}
	if m := cs.Combined(); m != nil {
		res.Combined, res.Rows = true, m.Totals.Rows
		res.Tasks = len(m.Workers)
	}
	s.log.Info("combine", "query", req.Query, "stage", req.Stage, "plan", res.Plan, "tasks_run", len(tasks), "wrote", res.Wrote, "sealed", res.Sealed)
	return res, nil
}

// prediction is a plan's predictions on the wire.
func prediction(p *combine.Plan) *flightclient.CombinePrediction {
	return &flightclient.CombinePrediction{DirectGETs: p.Predict.Direct.GET, CombineGETs: p.Predict.Combine.GET,
		CombinePUTs: p.Predict.Combine.PUT, CombinedGETs: p.Predict.Combined.GET, Pays: p.Predict.Pays}
}

// combineStatus maps combining's refusals to FailedPrecondition (a seal
// with tasks missing, a stage not sealed or combined by another plan,
// a group not ready or conflicting with the first level) and a plan the
// stage cannot have to InvalidArgument.
func combineStatus(err error) error {
	switch {
	case errors.Is(err, combine.ErrMissingTasks), errors.Is(err, combine.ErrNotSealed), errors.Is(err, combine.ErrAlreadyCombined),
		errors.Is(err, combine.ErrGroupNotReady), errors.Is(err, combine.ErrGroupConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, combine.ErrInvalidPlan):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return toStatus(err)
}
