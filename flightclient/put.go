package flightclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// PutWriter streams one worker's output into a DoPut. Only Commit
// commits: a writer that is aborted, or whose context ends first, commits
// nothing. Not safe for concurrent use.
type PutWriter struct {
	stream  flight.FlightService_DoPutClient
	w       *flight.Writer
	cancel  context.CancelFunc
	batches int64
	rows    int64
	err     error // the first failure; later calls return it
}

// Put opens a DoPut of one worker's output with the given schema. Every
// batch must have that schema; a worker with no rows commits an empty
// output. The context bounds the whole stream, Commit included.
func (c *Client) Put(ctx context.Context, cmd PutCommand, schema *arrow.Schema) (*PutWriter, error) {
	desc, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("DoPut descriptor: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.fc.DoPut(c.ctx(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(schema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: desc})
	return &PutWriter{stream: stream, w: w, cancel: cancel}, nil
}

// Write sends rec, whose rows go to partition p. It does not take
// ownership of rec. A slice of a batch holding list views or unions is
// sent with their offsets pushed to 0 (arrowipc.ForIPC): arrow-go's
// IPC writer fails on such slices or writes them wrongly.
func (p *PutWriter) Write(partition int, rec arrow.RecordBatch) error {
	if p.err != nil {
		return p.err
	}
	c := arrowipc.ForIPC(rec, memory.DefaultAllocator)
	err := p.w.WriteWithAppMetadata(c, batchAppMetadata(partition))
	c.Release()
	if err != nil {
		return p.fail(err)
	}
	p.batches++
	p.rows += rec.NumRows()
	return nil
}

// Commit ends the stream with the commit message, which counts the
// batches and rows written, and returns the sidecar's PutResult. A commit
// that loses to another attempt of the worker is AlreadyExists.
func (p *PutWriter) Commit() (*PutResult, error) {
	if p.err != nil {
		return nil, p.err
	}
	defer p.cancel()
	err := p.w.Close() // sends the schema if no batch did
	if err == nil {
		err = p.w.WriteMetadata(commitMetadata(p.batches, p.rows))
	}
	if err == nil {
		err = p.stream.CloseSend()
	}
	if err != nil {
		return nil, p.fail(err)
	}
	pr, err := p.stream.Recv()
	if err != nil {
		return nil, p.fail(err)
	}
	var res PutResult
	if err := json.Unmarshal(pr.GetAppMetadata(), &res); err != nil {
		return nil, p.fail(fmt.Errorf("PutResult app_metadata %q: %w", pr.GetAppMetadata(), err))
	}
	// The sidecar ends the stream after its one PutResult.
	if _, err := p.stream.Recv(); err != io.EOF {
		return &res, p.fail(fmt.Errorf("after the PutResult: want the end of the stream, got %v", err))
	}
	p.err = errors.New("DoPut already committed")
	return &res, nil
}

// Abort cancels the stream: the sidecar aborts the attempt's uploads and
// commits nothing. Safe to call after Commit, which it does not undo.
func (p *PutWriter) Abort() {
	if p.err == nil {
		p.err = errors.New("DoPut aborted")
	}
	p.cancel()
}

// fail records the first failure and ends the stream. A sidecar that
// rejects a stream mid-way makes sends fail with io.EOF; its status comes
// from Recv.
func (p *PutWriter) fail(err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := p.stream.Recv(); rerr != nil && rerr != io.EOF {
			err = rerr
		}
	}
	p.err = err
	p.cancel()
	return err
}
