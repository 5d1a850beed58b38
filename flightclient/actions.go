package flightclient

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// AllStages, as the stage of Release or Held, means every stage of the
// query.
const AllStages = -1

// Seal merges the manifests of workers 0..workers-1 of a stage into its
// stage manifest. Sealing again with the same attempts is a no-op; a
// worker that has not committed is FailedPrecondition.
func (c *Client) Seal(ctx context.Context, query string, stage, workers int) (*SealResult, error) {
	var res SealResult
	if err := c.Action(ctx, ActionSealStage, SealRequest{Query: query, Stage: stage, Workers: workers}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Combine runs the combine action: by default it plans, runs every task
// and seals, so that the stage's readers read G x J combined objects; see
// CombineRequest for one task, only the seal or only the plan. A seal
// with tasks missing is FailedPrecondition naming them.
func (c *Client) Combine(ctx context.Context, req CombineRequest) (*CombineResult, error) {
	var res CombineResult
	if err := c.Action(ctx, ActionCombine, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DeleteQuery aborts a query's open multipart uploads and deletes every
// object under its prefix. Idempotent.
func (c *Client) DeleteQuery(ctx context.Context, query string) (*DeleteResult, error) {
	var res DeleteResult
	if err := c.Action(ctx, ActionDeleteQuery, DeleteRequest{Query: query}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// GC runs the sidecar's gc: it aborts multipart uploads and deletes
// uncommitted attempt data older than olderThan, and results stages past
// the sidecar's results_retention. With combinedGrace above 0 it also
// deletes the first level of every stage combined more than
// combinedGrace ago (`durashuffle gc --combined-grace`): its worker
// manifests, data objects and index. Readers that opened such a stage
// before its combined seal read the first level; combinedGrace is how
// long they have. 0 keeps first levels. A negative olderThan or
// combinedGrace is InvalidArgument. The report is the one `durashuffle
// gc --json` prints. Idempotent.
func (c *Client) GC(ctx context.Context, olderThan, combinedGrace time.Duration) (*GCReport, error) {
	req := GCRequest{OlderThan: olderThan.String()}
	if combinedGrace != 0 {
		req.CombinedGrace = combinedGrace.String()
	}
	var res GCReport
	if err := c.Action(ctx, ActionGC, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Release drops a stage's workers (stage AllStages: the query's) from the
// sidecar's memory store; reads go on from the object store. Idempotent.
func (c *Client) Release(ctx context.Context, query string, stage int) (*ReleaseResult, error) {
	req := ReleaseRequest{Query: query}
	if stage != AllStages {
		req.Stage = &stage
	}
	var res ReleaseResult
	if err := c.Action(ctx, ActionRelease, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Held lists what the sidecar's memory store holds of a stage (query "":
// every query; stage AllStages: every stage).
func (c *Client) Held(ctx context.Context, query string, stage int) (*HeldResult, error) {
	req := HeldRequest{Query: query}
	if stage != AllStages {
		req.Stage = &stage
	}
	var res HeldResult
	if err := c.Action(ctx, ActionHeld, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Fetch reads stored bytes of a worker the sidecar holds in memory (the
// peer protocol): exactly req.Length bytes, or an error. NotFound means
// the sidecar does not hold them; read the object store instead.
func (c *Client) Fetch(ctx context.Context, req FetchRequest) ([]byte, error) {
	if req.Length < 0 || req.Length > MaxFetchBytes {
		return nil, fmt.Errorf("fetch of %d bytes: at most %d", req.Length, MaxFetchBytes)
	}
	body, _ := json.Marshal(req)
	buf := make([]byte, 0, req.Length)
	err := c.action(ctx, ActionFetch, body, func(b []byte) error {
		if int64(len(buf)+len(b)) > req.Length {
			return fmt.Errorf("answered more than %d bytes", req.Length)
		}
		buf = append(buf, b...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if int64(len(buf)) != req.Length {
		return nil, fmt.Errorf("answered %d bytes, want %d", len(buf), req.Length)
	}
	return buf, nil
}
