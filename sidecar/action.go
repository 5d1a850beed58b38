package sidecar

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/manifest"
)

var actionTypes = []*flight.ActionType{
	{Type: flightclient.ActionSealStage, Description: `Merge the manifests of workers 0..workers-1 into the stage manifest. Body {"query","stage","workers"}, optionally "combine": true (then combine it here, "parallel" tasks at a time, when its plan says combining pays); result {"sealed","rows",...,"combined","plan","predicted"}. FailedPrecondition names the workers that have not committed.`},
	{Type: flightclient.ActionDeleteQuery, Description: `Delete every object under the query's prefix and abort its open multipart uploads. Body {"query"}; result {"deleted_objects","aborted_uploads"}. Idempotent.`},
	{Type: flightclient.ActionGC, Description: `Abort multipart uploads and delete uncommitted attempt data older than older_than, and results stages older than results_retention (gc of the CLI). Body {"older_than": "6h"}, optionally "combined_grace": "24h" (delete the first level of stages combined longer ago, gc --combined-grace); result: the gc report (totals, aborted uploads, deleted objects and stages).`},
	{Type: flightclient.ActionRelease, Description: `Drop a stage's workers (or, without stage, the query's) from this sidecar's memory store, for an engine that knows the stage is consumed. Body {"query","stage"}; result {"workers","bytes_released"}. Reads go on from S3. Idempotent.`},
	{Type: flightclient.ActionHeld, Description: `List the workers this sidecar's memory store holds. Body {"query","stage"} (both optional); result {"budget_bytes","held_bytes","reserved_bytes","workers":[{"query","stage","worker","attempt","bytes","read"}]}.`},
	{Type: flightclient.ActionCombine, Description: `Combine a sealed stage's objects into G x J larger ones that its readers fetch in fewer GETs: plan, run every task and seal. Body {"query","stage","groups","buckets"} and at most one of "task" (run one), "seal" (only seal), "plan" (only plan), "group" (form one); "expect_workers","expect_partitions","expect_bytes" plan it while it is written, its tasks running as groups of workers commit; result {"plan","tasks","wrote","sealed","combined","predicted",...}. FailedPrecondition names the tasks missing at a seal, a group not ready, or a worker the groups hold twice or not at all.`},
	{Type: flightclient.ActionFetch, Description: `Peer protocol: raw stored bytes of a committed worker held in memory. Body {"query","stage","worker","attempt","object","offset","length"}; results: the bytes, in order, at most 1 MiB each. NotFound when not held; never reads S3.`},
}

// ListActions lists every action DoAction runs.
func (s *Server) ListActions(_ *flight.Empty, stream flight.FlightService_ListActionsServer) error {
	for _, a := range actionTypes {
		if err := stream.Send(a); err != nil {
			return err
		}
	}
	return nil
}

// DoAction runs one action and sends one JSON result.
func (s *Server) DoAction(a *flight.Action, stream flight.FlightService_DoActionServer) error {
	ctx := stream.Context()
	hook("DoAction")
	var (
		res any
		err error
	)
	switch a.GetType() {
	case flightclient.ActionSealStage:
		res, err = s.sealStage(ctx, a.GetBody())
	case flightclient.ActionDeleteQuery:
		res, err = s.deleteQuery(ctx, a.GetBody())
	case flightclient.ActionGC:
		res, err = s.runGC(ctx, a.GetBody())
	case flightclient.ActionRelease:
		res, err = s.release(a.GetBody())
	case flightclient.ActionHeld:
		res, err = s.held(a.GetBody())
	case flightclient.ActionCombine:
		res, err = s.combineStage(ctx, a.GetBody())
	case flightclient.ActionFetch:
		return s.fetch(ctx, a.GetBody(), stream)
	default:
		return invalidf("unknown action %q; ListActions lists %s, %s, %s, %s, %s, %s and %s", a.GetType(),
			flightclient.ActionSealStage, flightclient.ActionDeleteQuery, flightclient.ActionGC, flightclient.ActionRelease, flightclient.ActionHeld, flightclient.ActionCombine, flightclient.ActionFetch)
	}
	if err != nil {
		return err
	}
	b, _ := json.Marshal(res)
	return stream.Send(&flight.Result{Body: b})
}

func (s *Server) sealStage(ctx context.Context, body []byte) (*flightclient.SealResult, error) {
	var req flightclient.SealRequest
	if err := decodeStrict("seal-stage body", body, &req); err != nil {
		return nil, err
	}
	if !hasKey(body, "stage") {
		return nil, invalidf("seal-stage body has no stage")
	}
	if err := manifest.ValidateID("query", req.Query); err != nil {
		return nil, invalidf("seal-stage: %v", err)
	}
	if err := manifest.ValidateStage(req.Stage); err != nil {
		return nil, invalidf("seal-stage: %v", err)
	}
	if req.Workers < 1 || req.Workers > manifest.MaxSealWorkers {
		return nil, invalidf("seal-stage: workers must be between 1 and %d (the limit of one seal, MaxSealWorkers), got %d", manifest.MaxSealWorkers, req.Workers)
	}
	if req.Parallel < 0 || req.Parallel > maxCombineParallel || req.Parallel > 0 && !req.Combine {
		return nil, invalidf("seal-stage: parallel must be between 1 and %d, and goes with combine; got %d", maxCombineParallel, req.Parallel)
	}
	var m *manifest.Stage
	var plan *combine.Plan
	var err error
	if req.Combine {
		m, plan, err = s.c.SealCombined(ctx, req.Query, req.Stage, req.Workers, cmp.Or(req.Parallel, 4), combine.Options{})
		if err == nil {
			s.stages.evict(req.Query, req.Stage)
		}
	} else {
		m, err = s.c.Seal(ctx, req.Query, req.Stage, req.Workers)
	}
	if err != nil {
		return nil, combineStatus(err)
	}
	s.log.Info("stage sealed", "query", m.Query, "stage", m.Stage, "workers", len(m.Workers), "rows", m.Totals.Rows, "combined", m.Combines != nil)
	res := &flightclient.SealResult{
		Sealed: true, Query: m.Query, Stage: m.Stage, Workers: len(m.Workers), Partitions: m.Partitions,
		Rows: m.Totals.Rows, BytesLogical: m.Totals.BytesLogical, BytesStored: m.Totals.BytesStored,
		Objects: m.Totals.Objects, Key: s.c.Layout().StageManifestKey(m.Query, m.Stage),
		Combined: req.Combine && m.Combines != nil,
	}
	if plan != nil {
		res.Plan, res.Predicted = plan.ID, prediction(plan)
	}
	return res, nil
}

// deleteQuery removes every key under the query's prefix and aborts the
// multipart uploads open there. Writers of the query still running fail.
func (s *Server) deleteQuery(ctx context.Context, body []byte) (*flightclient.DeleteResult, error) {
	var req flightclient.DeleteRequest
	if err := decodeStrict("delete-query body", body, &req); err != nil {
		return nil, err
	}
	if err := manifest.ValidateID("query", req.Query); err != nil {
		return nil, invalidf("delete-query: %v", err)
	}
	s.stages.evict(req.Query, -1)
	defer s.stages.evict(req.Query, -1) // in case a DoGet cached it meanwhile
	// Memory first: a reader must not be served a deleted query's frames.
	s.c.MemoryRelease(req.Query, -1)
	defer s.c.MemoryRelease(req.Query, -1) // a DoPut that committed meanwhile
	// Manifests go first, so a reader opening the query meanwhile finds no
	// stage rather than a manifest whose data objects are gone.
	r, err := gc.DeleteQuery(ctx, s.c.Store(), s.c.Layout(), req.Query)
	if err != nil {
		return nil, toStatus(err)
	}
	res := &flightclient.DeleteResult{Query: req.Query, DeletedObjects: r.Totals.ObjectsDeleted, AbortedUploads: r.Totals.UploadsAborted}
	s.log.Info("query deleted", "query", req.Query, "objects", res.DeletedObjects, "uploads_aborted", res.AbortedUploads)
	return res, nil
}

// runGC collects garbage under the prefix: uploads and uncommitted attempt
// data older than older_than, results stages past results_retention, and
// with combined_grace the first levels of stages combined that long ago.
func (s *Server) runGC(ctx context.Context, body []byte) (*flightclient.GCReport, error) {
	var req flightclient.GCRequest
	if err := decodeStrict("gc body", body, &req); err != nil {
		return nil, err
	}
	d, err := time.ParseDuration(strings.TrimSpace(req.OlderThan))
	if err != nil || d < 0 {
		return nil, invalidf("gc: older_than %q: want a non-negative duration such as 6h", req.OlderThan)
	}
	var grace time.Duration
	if req.CombinedGrace != "" {
		grace, err = time.ParseDuration(strings.TrimSpace(req.CombinedGrace))
		if err != nil || grace < 0 {
			return nil, invalidf("gc: combined_grace %q: want a non-negative duration such as 24h (0s keeps first levels)", req.CombinedGrace)
		}
	}
	r, err := gc.Run(ctx, s.c.Store(), s.c.Layout(), gc.Options{OlderThan: d, ResultsRetention: s.cfg.GC.ResultsRetention.D(), CombinedGrace: grace})
	for _, st := range r.Stages {
		s.stages.evict(st.Query, st.Stage)
		s.c.MemoryRelease(st.Query, st.Stage)
	}
	// A worker manifest gc deleted is a combined stage's first level
	// (past combined_grace): a stage cached from it reads the combined
	// level from now on.
	for _, o := range r.Orphans {
		if k, _ := s.c.Layout().Parse(o.Key); k.Kind == manifest.KeyWorkerManifest {
			s.stages.evict(k.Query, k.Stage)
		}
	}
	if err != nil {
		return nil, toStatus(err)
	}
	s.log.Info("gc done", "older_than", d, "combined_grace", grace, "uploads_aborted", r.Totals.UploadsAborted,
		"objects_deleted", r.Totals.ObjectsDeleted, "bytes_deleted", r.Totals.BytesDeleted, "stages_deleted", r.Totals.StagesDeleted)
	res := gcReport(r)
	return &res, nil
}
