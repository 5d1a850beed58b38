package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// Errors of the sidecar's lifecycle.
var (
	// errShutdown is the cause of streams cut off when the shutdown grace
	// ends, and the message of calls refused while the sidecar drains.
	errShutdown = errors.New("sidecar is shutting down")
	// errCutOff: Shutdown's grace ended with calls still running; they
	// were cut off and their DoPut output aborted (nothing committed).
	errCutOff = errors.New("calls cut off at shutdown")
	// ErrCleanup: aborting a stream's output failed, so objects or open
	// multipart uploads of that attempt may remain.
	ErrCleanup = errors.New("cleanup of aborted streams failed")
	// ErrStuck: calls were still running when Shutdown's cleanup wait
	// ended (they ignore cancellation); Shutdown returned without them.
	ErrStuck = errors.New("calls stuck at shutdown")
)

// parseCommit reads a metadata-only message's app_metadata. ok is false
// when it is not a commit message (no JSON object with a "commit" key),
// which is ignored; a "commit" that is malformed is InvalidArgument.
func parseCommit(md []byte) (c flightclient.CommitCounts, ok bool, err error) {
	var keys map[string]json.RawMessage
	if json.Unmarshal(md, &keys) != nil {
		return c, false, nil
	}
	if _, has := keys["commit"]; !has {
		return c, false, nil
	}
	var m flightclient.CommitMessage
	if err := decodeStrict("DoPut commit message", md, &m); err != nil {
		return c, true, err
	}
	const want = `want {"commit": {"batches": B, "rows": R}}`
	switch {
	case m.Commit == nil || m.Commit.Batches == nil || m.Commit.Rows == nil:
		return c, true, invalidf("DoPut commit message %s: %s with both counts", clip(md), want)
	case *m.Commit.Batches < 0 || *m.Commit.Rows < 0:
		return c, true, invalidf("DoPut commit message %s: counts must not be negative", clip(md))
	}
	return *m.Commit, true, nil
}

// decodeStrict parses b as exactly one JSON object into v, rejecting
// unknown fields; what names the object in errors.
func decodeStrict(what string, b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return invalidf("%s is empty; want a JSON object", what)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidf("%s is not valid: %v (got %s)", what, err, clip(b))
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidf("%s has data after its JSON object (got %s)", what, clip(b))
	}
	return nil
}

// hasKey reports whether the JSON object b has key k with a value other
// than null: a required stage, which may be 0, is told apart from a
// missing one.
func hasKey(b []byte, k string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	v, ok := m[k]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// clip quotes at most 200 bytes of b for an error message.
func clip(b []byte) string {
	const n = 200
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "..."
	}
	return strconv.Quote(string(b))
}

func parsePutCommand(d *flight.FlightDescriptor) (flightclient.PutCommand, error) {
	var c flightclient.PutCommand
	if d == nil {
		return c, invalidf(`DoPut needs a FlightDescriptor of type CMD on its first message: {"query","stage","worker","attempt","partitions"}`)
	}
	if d.Type != flight.DescriptorCMD {
		return c, invalidf(`DoPut descriptor must be of type CMD holding {"query","stage","worker","attempt","partitions"}, got %v`, d.Type)
	}
	if err := decodeStrict("DoPut descriptor", d.Cmd, &c); err != nil {
		return c, err
	}
	if !hasKey(d.Cmd, "stage") {
		return c, invalidf("DoPut descriptor has no stage")
	}
	if c.Partitions < 1 {
		return c, invalidf("DoPut descriptor: partitions must be at least 1, got %d", c.Partitions)
	}
	if c.Partitions > durashuffle.MaxPartitions {
		return c, invalidf("DoPut descriptor: partitions %d is over the limit of %d (MaxPartitions)", c.Partitions, durashuffle.MaxPartitions)
	}
	for _, id := range []struct{ kind, v string }{{"query", c.Query}, {"worker", string(c.Worker)}} {
		if err := manifest.ValidateID(id.kind, id.v); err != nil {
			return c, invalidf("DoPut descriptor: %v", err)
		}
	}
	if c.Attempt != "" {
		if err := manifest.ValidateID("attempt", c.Attempt); err != nil {
			return c, invalidf("DoPut descriptor: %v", err)
		}
	}
	if err := manifest.ValidateStage(c.Stage); err != nil {
		return c, invalidf("DoPut descriptor: %v", err)
	}
	return c, nil
}

// partitionOf reads the partition of batch number n (0-based) from its
// app_metadata. A stage of one partition may omit it.
func partitionOf(md []byte, partitions int, n int64) (int, error) {
	if len(bytes.TrimSpace(md)) == 0 {
		if partitions == 1 {
			return 0, nil
		}
		return 0, invalidf(`batch %d has no app_metadata; every batch needs {"partition": N} with N in [0, %d)`, n, partitions)
	}
	var m flightclient.BatchMetadata
	if err := json.Unmarshal(md, &m); err != nil {
		return 0, invalidf(`batch %d: app_metadata is not {"partition": N}: %v (got %s)`, n, err, clip(md))
	}
	if m.Partition == nil {
		return 0, invalidf(`batch %d: app_metadata has no "partition" (got %s)`, n, clip(md))
	}
	p, err := strconv.ParseInt(m.Partition.String(), 10, 64)
	if err != nil {
		return 0, invalidf("batch %d: partition %s is not an integer", n, m.Partition)
	}
	if p < 0 || p >= int64(partitions) {
		return 0, invalidf("batch %d: partition %d is outside [0, %d)", n, p, partitions)
	}
	return int(p), nil
}

// maxTicketBytes bounds a ticket before it is decoded: room for every
// partition of the widest stage ("1048575," each) and the rest, so that
// a ticket's partition list costs a bounded []int before any slot is
// taken.
const maxTicketBytes = 8*manifest.MaxPartitions + 4096

func parseTicket(b []byte) (flightclient.Ticket, []int, error) {
	var t flightclient.Ticket
	if len(b) > maxTicketBytes {
		return t, nil, invalidf("ticket of %d bytes: at most %d (a partition list of MaxPartitions)", len(b), maxTicketBytes)
	}
	if err := decodeStrict("ticket", b, &t); err != nil {
		return t, nil, err
	}
	if len(t.Partitions) > manifest.MaxPartitions {
		return t, nil, invalidf("ticket names %d partitions: at most %d (MaxPartitions)", len(t.Partitions), manifest.MaxPartitions)
	}
	if err := manifest.ValidateID("query", t.Query); err != nil {
		return t, nil, invalidf("ticket: %v", err)
	}
	if !hasKey(b, "stage") {
		return t, nil, invalidf("ticket has no stage")
	}
	if err := manifest.ValidateStage(t.Stage); err != nil {
		return t, nil, invalidf("ticket: %v", err)
	}
	switch t.Order {
	case "", flightclient.OrderPartition, flightclient.OrderStorage:
	default:
		return t, nil, invalidf(`ticket order %q: want "partition" or "storage"`, t.Order)
	}
	switch {
	case t.Partition != nil && t.Partitions != nil:
		return t, nil, invalidf(`ticket has both "partition" and "partitions"; give one`)
	case t.Partition != nil:
		return t, []int{*t.Partition}, nil
	default:
		// No partition, or an empty list: every partition of the
		// stage, as Stage.ReadPartitions and ReadStored read nil.
		return t, t.Partitions, nil
	}
}

// parseStageRef reads a stage from a CMD descriptor (JSON with query and
// stage; other keys, such as DoPut's, are ignored) or a PATH descriptor
// [query, stage].
func parseStageRef(d *flight.FlightDescriptor) (string, int, error) {
	if d == nil {
		return "", 0, invalidf(`no FlightDescriptor: want CMD {"query","stage"} or PATH [query, stage]`)
	}
	var ref flightclient.StageRef
	switch d.Type {
	case flight.DescriptorCMD:
		if err := json.Unmarshal(d.Cmd, &ref); err != nil {
			return "", 0, invalidf(`descriptor is not {"query","stage"}: %v (got %s)`, err, clip(d.Cmd))
		}
		if !hasKey(d.Cmd, "stage") {
			return "", 0, invalidf("descriptor has no stage")
		}
	case flight.DescriptorPATH:
		if len(d.Path) != 2 {
			return "", 0, invalidf("PATH descriptor must be [query, stage], got %q", d.Path)
		}
		n, err := strconv.Atoi(d.Path[1])
		if err != nil {
			return "", 0, invalidf("PATH descriptor [query, stage]: stage %q is not an integer", d.Path[1])
		}
		ref = flightclient.StageRef{Query: d.Path[0], Stage: n}
	default:
		return "", 0, invalidf("descriptor type %v: want CMD or PATH", d.Type)
	}
	if err := manifest.ValidateID("query", ref.Query); err != nil {
		return "", 0, invalidf("descriptor: %v", err)
	}
	if err := manifest.ValidateStage(ref.Stage); err != nil {
		return "", 0, invalidf("descriptor: %v", err)
	}
	return ref.Query, ref.Stage, nil
}

// stageDescriptor is the CMD descriptor of a stage's FlightInfo.
func stageDescriptor(query string, stage int) *flight.FlightDescriptor {
	b, _ := json.Marshal(flightclient.StageRef{Query: query, Stage: stage})
	return &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: b}
}

func invalidf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// toStatus gives err its gRPC code by class. Errors that already carry a
// status (from the stream itself, or made here) keep it.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	var pe *safe.PanicError
	if errors.As(err, &pe) {
		// A panic the library contained in a goroutine of its own: the
		// interceptor logs its stack and counts it, as for one in the
		// handler itself.
		return &panicStatus{pe: pe, st: status.New(codes.Internal, err.Error())}
	}
	return status.Error(codeOf(err), err.Error())
}

// panicStatus is the Internal status of an error that wraps a contained
// panic, keeping the panic for the interceptor.
type panicStatus struct {
	pe *safe.PanicError
	st *status.Status
}

func (p *panicStatus) Error() string              { return p.st.Err().Error() }
func (p *panicStatus) GRPCStatus() *status.Status { return p.st }

func codeOf(err error) codes.Code {
	var fe *reader.FrameError
	switch {
	case errors.Is(err, errShutdown):
		return codes.Unavailable
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, manifest.ErrInvalidID), errors.Is(err, durashuffle.ErrInvalidConfig),
		errors.Is(err, durashuffle.ErrPartition), errors.Is(err, durashuffle.ErrSchema), errors.Is(err, durashuffle.ErrBatch),
		errors.Is(err, durashuffle.ErrPartitionCount),
		errors.Is(err, manifest.ErrTooManyWorkers):
		return codes.InvalidArgument
	case errors.Is(err, manifest.ErrStageNotFound):
		return codes.NotFound
	case errors.Is(err, manifest.ErrAlreadyCommitted):
		return codes.AlreadyExists
	case errors.Is(err, durashuffle.ErrKey):
		return codes.PermissionDenied
	case errors.Is(err, manifest.ErrMissingWorkers), errors.Is(err, manifest.ErrVersion), errors.Is(err, manifest.ErrSealConflict),
		errors.Is(err, durashuffle.ErrCommitGuard):
		return codes.FailedPrecondition
	case errors.As(err, &fe), errors.Is(err, manifest.ErrCorrupt), errors.Is(err, reader.ErrCorrupt),
		errors.Is(err, reader.ErrChecksum), errors.Is(err, reader.ErrTruncated):
		return codes.DataLoss
	case store.IsNotFound(err):
		// A manifest names an object that is gone: the stage was deleted
		// while being read.
		return codes.NotFound
	case durashuffle.IsRetryable(err):
		// A rerun of the task may succeed: InvalidPart from Complete,
		// MinIO's tie-break after a restart, included.
		return codes.Unavailable
	}
	// A status wrapped inside a plain error (a stream's Recv failure).
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return s.Code()
	}
	return codes.Internal
}

func isNotFound(err error) bool { return store.IsNotFound(err) }
