package sidecar

import (
	"bytes"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// recvOnly is a DoPut stream that answers Recv from a list.
type recvOnly struct {
	flight.FlightService_DoPutServer
	msgs []*flight.FlightData
}

func (r *recvOnly) Recv() (*flight.FlightData, error) {
	if len(r.msgs) == 0 {
		return nil, io.EOF
	}
	fd := r.msgs[0]
	r.msgs = r.msgs[1:]
	return fd, nil
}

// TestPutStreamKeepsNoWaitingBytes: the descriptor-only first message
// and the schema message are passed on without a body or app_metadata,
// so that a DoPut waiting for a slot holds neither.
func TestPutStreamKeepsNoWaitingBytes(t *testing.T) {
	var sent capture
	w := flight.NewRecordWriter(&sent, ipc.WithSchema(arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(sent) == 0 || len(sent[0].DataHeader) == 0 {
		t.Fatal("no schema message written")
	}
	header := bytes.Clone(sent[0].DataHeader)
	ballast := make([]byte, 1<<20)
	in := &putStream{stream: &recvOnly{msgs: []*flight.FlightData{
		{FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte("{}")}, DataBody: ballast, AppMetadata: ballast},
		{DataHeader: header, DataBody: ballast, AppMetadata: ballast},
	}}, mem: memory.DefaultAllocator}
	for i := range 2 {
		fd, err := in.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if fd.DataBody != nil || fd.AppMetadata != nil {
			t.Fatalf("message %d passed on with a body of %d bytes and app_metadata of %d", i, len(fd.DataBody), len(fd.AppMetadata))
		}
	}
}

// capture keeps the FlightData a record writer sends.
type capture []*flight.FlightData

func (c *capture) Send(fd *flight.FlightData) error {
	*c = append(*c, fd)
	return nil
}
