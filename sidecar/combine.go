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
// each holds its input in memory.
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
	for _, on := range []bool{req.Task != nil, req.Seal, req.Plan} {
		if on {
			modes++
		}
	}
	switch {
	case modes > 1:
		return nil, invalidf("combine: task, seal and plan are mutually exclusive")
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
	cs, err := s.c.Combine(ctx, req.Query, req.Stage, combine.Options{Groups: req.Groups, Buckets: req.Buckets})
	if err != nil {
		return nil, combineStatus(err)
	}
	res := &flightclient.CombineResult{Query: req.Query, Stage: req.Stage}
	if p := cs.Plan(); p != nil {
		res.Plan, res.Groups, res.Buckets, res.Tasks = p.ID, len(p.Groups), len(p.Buckets), p.Tasks()
		res.Predicted = &flightclient.CombinePrediction{DirectGETs: p.Predict.Direct.GET, CombineGETs: p.Predict.Combine.GET,
			CombinePUTs: p.Predict.Combine.PUT, CombinedGETs: p.Predict.Combined.GET, Pays: p.Predict.Pays}
	}
	var tasks []*combine.Task
	switch {
	case req.Plan:
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

// combineStatus maps combining's refusals to FailedPrecondition (a seal
// with tasks missing, a stage not sealed or combined by another plan)
// and a plan the stage cannot have to InvalidArgument.
func combineStatus(err error) error {
	switch {
	case errors.Is(err, combine.ErrMissingTasks), errors.Is(err, combine.ErrNotSealed), errors.Is(err, combine.ErrAlreadyCombined):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, combine.ErrInvalidPlan):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return toStatus(err)
}
