package flightclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Reader reads the record batches of a DoGet: Next, RecordBatch, Err,
// Schema, as an ipc.Reader. Release ends the stream.
type Reader struct {
	*flight.Reader
	cancel context.CancelFunc
}

// Partition is the partition of the current batch, from its app_metadata.
func (r *Reader) Partition() (int, error) {
	var m BatchMetadata
	md := r.LatestAppMetadata()
	if err := json.Unmarshal(md, &m); err != nil || m.Partition == nil {
		return 0, fmt.Errorf(`batch app_metadata %q: want {"partition": N}`, md)
	}
	p, err := strconv.Atoi(m.Partition.String())
	if err != nil {
		return 0, fmt.Errorf("batch app_metadata %q: %w", md, err)
	}
	return p, nil
}

// Release releases the reader and cancels its stream.
func (r *Reader) Release() {
	r.Reader.Release()
	r.cancel()
}

// Get reads the partitions a ticket names. The schema has arrived when
// it returns; a stage that does not exist is NotFound.
func (c *Client) Get(ctx context.Context, t Ticket, opts ...ipc.Option) (*Reader, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("ticket: %w", err)
	}
	return c.GetTicket(ctx, &flight.Ticket{Ticket: b}, opts...)
}

// GetTicket is Get of a ticket as it stands, such as an endpoint's of
// Describe.
func (c *Client) GetTicket(ctx context.Context, t *flight.Ticket, opts ...ipc.Option) (*Reader, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.fc.DoGet(c.ctx(ctx), t)
	if err != nil {
		cancel()
		return nil, err
	}
	rdr, err := flight.NewRecordReader(stream, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Reader{Reader: rdr, cancel: cancel}, nil
}

// StageInfo describes a committed stage: its FlightInfo, decoded.
type StageInfo struct {
	StageMetadata
	Schema *arrow.Schema
	// Partitions are the stage's partitions in order; each one's ticket
	// is Info.Endpoint[i].Ticket.
	Partitions []PartitionMetadata
	Info       *flight.FlightInfo
}

// Describe describes a stage (GetFlightInfo). A stage with no manifest
// is NotFound.
func (c *Client) Describe(ctx context.Context, query string, stage int) (*StageInfo, error) {
	d, _ := json.Marshal(StageRef{Query: query, Stage: stage})
	info, err := c.fc.GetFlightInfo(c.ctx(ctx), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: d})
	if err != nil {
		return nil, err
	}
	return stageInfo(info)
}

// List describes every committed stage of a query (ListFlights; query
// "": of every query).
func (c *Client) List(ctx context.Context, query string) ([]*StageInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var crit []byte
	if query != "" {
		crit, _ = json.Marshal(ListCriteria{Query: query})
	}
	stream, err := c.fc.ListFlights(c.ctx(ctx), &flight.Criteria{Expression: crit})
	if err != nil {
		return nil, err
	}
	var out []*StageInfo
	for {
		info, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		si, err := stageInfo(info)
		if err != nil {
			return nil, err
		}
		out = append(out, si)
	}
}

func stageInfo(info *flight.FlightInfo) (*StageInfo, error) {
	si := &StageInfo{Info: info}
	if err := json.Unmarshal(info.GetAppMetadata(), &si.StageMetadata); err != nil {
		return nil, fmt.Errorf("FlightInfo app_metadata %q: %w", info.GetAppMetadata(), err)
	}
	sc, err := flight.DeserializeSchema(info.GetSchema(), memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("FlightInfo schema of %s stage %d: %w", si.Query, si.Stage, err)
	}
	si.Schema = sc
	for i, ep := range info.GetEndpoint() {
		var pm PartitionMetadata
		if err := json.Unmarshal(ep.GetAppMetadata(), &pm); err != nil {
			return nil, fmt.Errorf("endpoint %d app_metadata %q: %w", i, ep.GetAppMetadata(), err)
		}
		si.Partitions = append(si.Partitions, pm)
	}
	return si, nil
}
