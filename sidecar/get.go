package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/durashuffle/durashuffle/internal/arrowipc"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
)

// DoGet streams the records of the ticket's partitions in the reader's
// order: partitions ascending (repeats dropped), then workers in manifest
// order, then each worker's frames in write order; or, for a ticket with
// "order": "storage", in the order they are stored (Stage.ReadStored).
// Every batch's app_metadata is {"partition": N}. A stage with no
// manifest is NotFound, a partition outside the stage InvalidArgument.
func (s *Server) DoGet(tkt *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	t, parts, err := parseTicket(tkt.GetTicket())
	if err != nil {
		return err
	}
	ctx := stream.Context()
	release, err := s.acquire(ctx, "DoGet")
	if err != nil {
		return err
	}
	defer release()
	st, cached, err := s.openStage(ctx, t.Query, t.Stage)
	if err != nil {
		return toStatus(err)
	}
	storage := t.Order == flightclient.OrderStorage
	sent, err := s.sendPartitions(ctx, stream, st, parts, storage)
	if err != nil && cached && sent == 0 && isNotFound(err) {
		// The stage was deleted, or deleted and written again, behind
		// the cache: reload it once.
		s.stages.evict(t.Query, t.Stage)
		if st, _, err = s.openStage(ctx, t.Query, t.Stage); err != nil {
			return toStatus(err)
		}
		_, err = s.sendPartitions(ctx, stream, st, parts, storage)
	}
	return toStatus(err)
}

// sendPartitions streams the partitions of st (nil: all), in storage
// order or by partition, and returns the batches sent.
func (s *Server) sendPartitions(ctx context.Context, stream flight.FlightService_DoGetServer, st *reader.Stage, parts []int, storage bool) (int, error) {
	m := st.Manifest()
	read := st.ReadPartitions
	if storage {
		read = st.ReadStored
	}
	recs, err := read(ctx, parts)
	if err != nil {
		return 0, err
	}
	defer recs.Release()
	w := flight.NewRecordWriter(stream, ipc.WithSchema(st.Schema()), ipc.WithAllocator(s.mem))
	var (
		rows int64
		sent int
	)
	defer func() { s.m.Rows("DoGet", rows) }()
	// A message carries one batch; batches are cut to half the message
	// limit so a frame written with a larger frame_target_bytes than the
	// reader's max_message_bytes still goes out.
	maxBytes := int64(s.cfg.Sidecar.MaxMessageBytes) / 2
	for recs.Next() {
		hook("DoGet.batch")
		rec := recs.RecordBatch()
		meta := []byte(fmt.Sprintf(`{"partition":%d}`, recs.Partition()))
		for _, piece := range splitBatch(rec, maxBytes) {
			// A slice holding list views or unions goes with their offsets
			// pushed to 0: arrow-go's IPC writer fails on such slices or
			// writes them wrongly.
			c := arrowipc.ForIPC(piece, s.mem)
			if piece != rec {
				piece.Release()
			}
			err := w.WriteWithAppMetadata(c, meta)
			c.Release()
			if err != nil {
				return sent + 1, fmt.Errorf("send %s stage %d: %w", m.Query, m.Stage, err)
			}
			sent++
		}
		rows += rec.NumRows()
	}
	if err := recs.Err(); err != nil {
		return sent, err
	}
	// With no batches at all, Close still sends the schema.
	return sent, w.Close()
}

// GetFlightInfo describes one committed stage (sealed, or assembled from
// its worker manifests): schema, total rows and logical bytes, and one
// endpoint per partition whose ticket DoGet takes.
func (s *Server) GetFlightInfo(ctx context.Context, d *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	st, err := s.describedStage(ctx, d)
	if err != nil {
		return nil, err
	}
	return s.flightInfo(ctx, st, d)
}

// GetSchema returns a committed stage's schema.
func (s *Server) GetSchema(ctx context.Context, d *flight.FlightDescriptor) (*flight.SchemaResult, error) {
	st, err := s.describedStage(ctx, d)
	if err != nil {
		return nil, err
	}
	return &flight.SchemaResult{Schema: flight.SerializeSchema(st.Schema(), s.mem)}, nil
}

// describedStage opens the stage a descriptor names; its errors are
// gRPC statuses.
func (s *Server) describedStage(ctx context.Context, d *flight.FlightDescriptor) (*reader.Stage, error) {
	query, stage, err := parseStageRef(d)
	if err != nil {
		return nil, err
	}
	st, _, err := s.openStage(ctx, query, stage)
	if err != nil {
		return nil, toStatus(err)
	}
	return st, nil
}

// ListFlights lists every committed stage under the prefix, or only those
// of one query when the criteria expression is {"query": "..."}. Each
// stage costs a manifest GET (a LIST and a GET per worker if unsealed).
func (s *Server) ListFlights(c *flight.Criteria, stream flight.FlightService_ListFlightsServer) error {
	ctx := stream.Context()
	var crit flightclient.ListCriteria
	if len(c.GetExpression()) > 0 {
		if err := decodeStrict("ListFlights criteria", c.GetExpression(), &crit); err != nil {
			return err
		}
	}
	queries := []string{crit.Query}
	if crit.Query == "" {
		var err error
		if queries, err = manifest.ListQueries(ctx, s.st, s.c.Layout()); err != nil {
			return toStatus(err)
		}
	}
	for _, q := range queries {
		stages, err := manifest.ListStages(ctx, s.st, s.c.Layout(), q)
		if err != nil {
			return toStatus(err)
		}
		for _, si := range stages {
			st, _, err := s.openStage(ctx, si.Query, si.Stage)
			if errors.Is(err, manifest.ErrStageNotFound) {
				continue // deleted since it was listed
			}
			if err != nil {
				return toStatus(err)
			}
			info, err := s.flightInfo(ctx, st, stageDescriptor(si.Query, si.Stage))
			if err != nil {
				return err
			}
			if err := stream.Send(info); err != nil {
				return err
			}
		}
	}
	return nil
}

// flightInfo describes a stage with one endpoint per partition, from the
// partition summary of its index (one ranged GET, no entries; cached
// with the stage) or, unsealed, its frames in memory. Errors are gRPC
// statuses.
func (s *Server) flightInfo(ctx context.Context, st *reader.Stage, d *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	m := st.Manifest()
	sum, err := s.stages.summary(ctx, st)
	if err != nil {
		return nil, toStatus(err)
	}
	per := make([]flightclient.PartitionMetadata, m.Partitions)
	for i := range per {
		ps := sum[i]
		per[i] = flightclient.PartitionMetadata{Partition: i, Rows: ps.Rows, BytesLogical: ps.BytesLogical, BytesStored: ps.BytesStored, Frames: int(ps.Frames)}
	}
	t := m.Totals // summed by seal, or by LoadStage for an unsealed stage
	info := &flight.FlightInfo{
		Schema:           flight.SerializeSchema(st.Schema(), s.mem),
		FlightDescriptor: d,
		TotalRecords:     t.Rows,
		TotalBytes:       t.BytesLogical,
		Ordered:          true,
	}
	for _, p := range per {
		tkt, _ := json.Marshal(flightclient.Ticket{Query: m.Query, Stage: m.Stage, Partition: &p.Partition})
		md, _ := json.Marshal(p)
		info.Endpoint = append(info.Endpoint, &flight.FlightEndpoint{Ticket: &flight.Ticket{Ticket: tkt}, AppMetadata: md})
	}
	info.AppMetadata, _ = json.Marshal(flightclient.StageMetadata{
		Query: m.Query, Stage: m.Stage, Sealed: m.Sealed, Results: m.Results, Workers: len(m.Workers),
		Partitions: m.Partitions, Rows: t.Rows, BytesLogical: t.BytesLogical, BytesStored: t.BytesStored,
		Objects: t.Objects, Frames: t.Frames,
	})
	return info, nil
}

// splitBatch cuts rec into row slices of at most about maxBytes each. The
// pieces other than rec itself are the caller's to release.
func splitBatch(rec arrow.RecordBatch, maxBytes int64) []arrow.RecordBatch {
	size := frame.LogicalSize(rec)
	n := rec.NumRows()
	if size <= maxBytes || n <= 1 || maxBytes <= 0 {
		return []arrow.RecordBatch{rec}
	}
	step := max(1, n*maxBytes/size)
	var out []arrow.RecordBatch
	for lo := int64(0); lo < n; lo += step {
		out = append(out, rec.NewSlice(lo, min(lo+step, n)))
	}
	return out
}
