package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/ipcguard"
	"github.com/durashuffle/durashuffle/manifest"
)

// DoPut writes one worker attempt's output: the descriptor names it, each
// record batch's app_metadata its partition. Only an explicit commit
// message commits: the stream's last FlightData, without a batch, whose
// app_metadata is {"commit": {"batches": B, "rows": R}} with the counts
// the sidecar received (a mismatch is InvalidArgument naming both). The
// one PutResult then carries a PutResult JSON summary. A stream that ends
// without the commit message fails with Aborted; one that is cancelled,
// fails, or is rejected (InvalidArgument for a bad descriptor, partition
// or schema change) aborts too: nothing is committed and no multipart
// upload stays open. A worker another attempt already committed fails
// with AlreadyExists.
//
// While the shared upload budget is spent, DoPut stops reading the stream,
// so gRPC flow control slows the client instead of the sidecar buffering.
// A stream takes one of max_streams slots once its descriptor and schema
// have arrived (within stream_first_message_timeout), so a client that
// opens streams and sends nothing holds none; a stream that then sends
// nothing for stream_idle_timeout fails with DeadlineExceeded.
func (s *Server) DoPut(stream flight.FlightService_DoPutServer) (err error) {
	ctx := stream.Context()
	start := time.Now()
	// Every DoPut counts, as a commit or an abort: one refused before
	// its writer started too.
	var committed bool
	defer func() { s.m.PutDone(committed) }()

	in := &putStream{stream: stream, mem: s.mem}
	rdr, err := flight.NewRecordReader(in, ipc.WithAllocator(s.decodeAllocator()))
	if err != nil {
		return in.failure(err, "read the stream's schema")
	}
	defer rdr.Release()
	cmd, err := parsePutCommand(rdr.LatestFlightDescriptor())
	if err != nil {
		return err
	}
	key, err := s.callKey(ctx)
	if err != nil {
		return err
	}
	release, err := s.acquire(ctx, "DoPut")
	if err != nil {
		return err
	}
	defer release()
	w, err := s.c.NewWriter(ctx, durashuffle.WriterOptions{
		Key:        key,
		Query:      cmd.Query,
		Stage:      cmd.Stage,
		Worker:     string(cmd.Worker),
		Attempt:    cmd.Attempt,
		Partitions: cmd.Partitions,
		Schema:     rdr.Schema(),
		Results:    cmd.Results,
		Mem:        s.mem,
	})
	if err != nil {
		return toStatus(err)
	}
	opt := w.Options()
	log := s.log.With("query", opt.Query, "stage", opt.Stage, "worker", opt.Worker, "attempt", opt.Attempt)
	var batches, rows int64
	var commitErr error // Commit's own, before it became a status
	defer func() {
		s.m.Rows("DoPut", rows)
		if committed {
			return
		}
		// Also while a panic unwinds: the writer may have been left in
		// any state, so the abort is bounded.
		if aerr := s.abort(w); aerr != nil {
			s.abortErrs.Add(1)
			log.Error("abort failed: objects or uploads of this attempt may remain", "err", aerr)
		}
		if s.hard.Err() != nil {
			s.cut.Add(1) // cut off when the shutdown grace ended
		}
		if errors.Is(commitErr, manifest.ErrCommitUnknown) {
			log.Warn("put's commit outcome unknown: its objects are kept, and its manifest may have landed", "batches", batches, "rows", rows, "err", err)
			return
		}
		log.Warn("put aborted, nothing committed", "batches", batches, "rows", rows, "err", err)
	}()

	var (
		lastMD   []byte
		lastPart int
	)
	for rdr.Next() {
		rec := rdr.RecordBatch()
		md := rdr.LatestAppMetadata()
		p := lastPart
		if lastMD == nil || !bytes.Equal(md, lastMD) {
			if p, err = partitionOf(md, opt.Partitions, batches); err != nil {
				return err
			}
			lastMD, lastPart = append(lastMD[:0], md...), p
		}
		hook("DoPut.batch")
		if err := w.Write(p, rec); err != nil {
			return toStatus(fmt.Errorf("write batch %d (%d rows) to partition %d: %w", batches, rec.NumRows(), p, err))
		}
		batches++
		rows += rec.NumRows()
	}
	if err := rdr.Err(); err != nil {
		return in.failure(err, fmt.Sprintf("read batch %d", batches))
	}
	switch c := in.commit; {
	case c == nil:
		return status.Errorf(codes.Aborted, `stream ended without commit: received %d batches (%d rows) and no commit message; `+
			`nothing was committed. End a DoPut with a message without a batch whose app_metadata is {"commit": {"batches": B, "rows": R}}`,
			batches, rows)
	case *c.Batches != batches || *c.Rows != rows:
		return invalidf("commit message counts %d batches and %d rows, the sidecar received %d batches and %d rows; nothing was committed",
			*c.Batches, *c.Rows, batches, rows)
	}
	m, err := w.Commit(ctx)
	if err != nil {
		commitErr = err
		return toStatus(err)
	}
	committed = true
	t := m.Sum()
	res := flightclient.PutResult{
		Committed: true, Query: m.Query, Stage: m.Stage, Worker: m.Worker, Attempt: m.Attempt,
		Partitions: m.Partitions, Batches: batches, Rows: t.Rows, BytesLogical: t.BytesLogical,
		BytesStored: t.BytesStored, Objects: t.Objects, Frames: t.Frames, Parts: t.Parts,
	}
	log.Info("put committed", "batches", batches, "rows", t.Rows, "bytes_stored", t.BytesStored,
		"objects", t.Objects, "parts", t.Parts, "seconds", time.Since(start).Seconds())
	b, _ := json.Marshal(res)
	if err := stream.Send(&flight.PutResult{AppMetadata: b}); err != nil {
		// Committed all the same; the client learns it by reading the
		// worker manifest or retrying (AlreadyExists).
		log.Warn("send PutResult after commit", "err", err)
	}
	return nil
}

// abort aborts w, waiting at most abortWait(cleanup_timeout): a writer
// left locked by a bug cannot hold the stream (its abort goes on, in the
// background, and its error is logged).
func (s *Server) abort(w *durashuffle.Writer) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- s.panicked("DoPut", r)
			}
		}()
		done <- w.Abort()
	}()
	wait := abortWait(s.cleanupTimeout())
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	opt := w.Options()
	go func() {
		if err := <-done; err != nil {
			s.log.Error("abort that overran its wait failed", "query", opt.Query, "stage", opt.Stage, "worker", opt.Worker, "attempt", opt.Attempt, "err", err)
		}
	}()
	return fmt.Errorf("abort of attempt %s still running after %v (2 x cleanup_timeout + 1s); the stream ends without it", opt.Attempt, wait)
}

// putStream sits between the gRPC stream and the Flight record reader. It
// checks every IPC header before the reader sees it (ipcguard.CheckHeader),
// drops messages without an IPC header (app_metadata-only messages carry
// no rows) and repeats of the stream's schema, rejects a schema that
// differs from the first, and remembers transport failures so they are
// not mistaken for malformed input.
type putStream struct {
	stream  flight.FlightService_DoPutServer
	mem     memory.Allocator
	n       int64  // messages passed on
	batches int64  // record batch messages passed on
	schema  []byte // IPC header of the stream's schema message
	recvErr error  // the transport's failure, other than EOF
	err     error  // a protocol violation found here (a status)
	// commit holds the counts of the commit message once it arrived and
	// the stream ended right after it; nil: no commit was asked for.
	commit *flightclient.CommitCounts
}

func (p *putStream) Recv() (*flight.FlightData, error) {
	for {
		fd, err := p.stream.Recv()
		if err != nil {
			if err != io.EOF {
				p.recvErr = err
			}
			return nil, err
		}
		if len(fd.DataHeader) > 0 {
			if err := ipcguard.CheckHeader(fd.DataHeader); err != nil {
				p.err = invalidf("IPC message %d (after %d batches): malformed header: %v; nothing was committed", p.n, p.batches, err)
				return nil, p.err
			}
		}
		if len(fd.DataHeader) == 0 {
			if p.n == 0 {
				p.n++
				// The reader takes the descriptor from it and keeps it while
				// the stream waits for a slot: nothing else of it.
				fd.DataBody, fd.AppMetadata = nil, nil
				return fd, nil
			}
			c, ok, err := parseCommit(fd.AppMetadata)
			if err != nil {
				p.err = err
				return nil, err
			}
			if !ok {
				continue // metadata of the client's own, no rows
			}
			return nil, p.committed(c)
		}
		switch messageType(fd.DataHeader) {
		case ipc.MessageSchema:
			// A schema message has no body, and its app_metadata is no
			// batch's: neither is kept while the stream waits for a slot.
			fd.DataBody, fd.AppMetadata = nil, nil
			if p.schema == nil {
				p.schema = bytes.Clone(fd.DataHeader)
				break
			}
			if bytes.Equal(fd.DataHeader, p.schema) {
				continue
			}
			if err := p.schemaChange(fd.DataHeader); err != nil {
				p.err = err
				return nil, err
			}
			continue // an equal schema, encoded differently
		case ipc.MessageRecordBatch:
			p.batches++
		}
		p.n++
		return fd, nil
	}
}

// decodeAllocator is the allocator of one DoPut's IPC reader: at most
// coalesce_budget (what the writer may still hold of earlier batches) and
// 4 x max_message_bytes (a message's buffers decompressed) decoded at
// once.
func (s *Server) decodeAllocator() memory.Allocator {
	msg := int64(s.cfg.Sidecar.MaxMessageBytes)
	if msg <= 0 {
		msg = int64(durashuffle.DefaultConfig().Sidecar.MaxMessageBytes)
	}
	return ipcguard.NewAllocator(s.mem, int64(s.cfg.Write.CoalesceBudget)+4*msg,
		"a DoPut may hold decoded at once (coalesce_budget + 4 x max_message_bytes)")
}

// committed records the commit message and checks that the client's
// stream ends right after it: the commit is the last message. It returns
// io.EOF when it does, so the reader ends as on a plain end of stream.
func (p *putStream) committed(c flightclient.CommitCounts) error {
	fd, err := p.stream.Recv()
	switch {
	case err == io.EOF:
		p.commit = &c
		return io.EOF
	case err != nil:
		p.recvErr = err
		return err
	}
	what := "a metadata-only message"
	if len(fd.DataHeader) > 0 {
		what = "another IPC message"
	}
	p.err = invalidf("%s followed the commit message (after %d batches); the commit message must be the last of the stream, and nothing was committed", what, p.batches)
	return p.err
}

// schemaChange compares a schema sent mid-stream with the first one.
func (p *putStream) schemaChange(header []byte) error {
	want, err1 := decodeSchemaMessage(p.schema, p.mem)
	got, err2 := decodeSchemaMessage(header, p.mem)
	if err1 != nil || err2 != nil {
		return invalidf("schema changed mid-stream after %d batches: cannot decode the new schema: %v", p.batches, errors.Join(err1, err2))
	}
	if got.Equal(want) {
		return nil
	}
	return invalidf("schema changed mid-stream after %d batches: got %s, want the stream's first schema %s; a DoPut stream has one schema",
		p.batches, oneLine(got), oneLine(want))
}

// failure turns the record reader's error into a status: the transport's
// own error, a protocol violation found by putStream, or malformed IPC
// data (InvalidArgument).
func (p *putStream) failure(err error, doing string) error {
	switch {
	case p.err != nil:
		return p.err
	case p.recvErr != nil:
		return toStatus(p.recvErr)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return invalidf("%s: the stream ended before its schema; send the schema (arrow-go: flight.NewRecordWriter with ipc.WithSchema) even with no batches", doing)
	}
	return invalidf("%s: malformed Arrow IPC data: %v", doing, err)
}

// messageType reads the type of an IPC message from its header.
func messageType(header []byte) (t ipc.MessageType) {
	defer func() {
		if recover() != nil {
			t = ipc.MessageNone // let the IPC reader report the garbage
		}
	}()
	m := ipc.NewMessage(memory.NewBufferBytes(header), memory.NewBufferBytes(nil))
	defer m.Release()
	return m.Type()
}

// decodeSchemaMessage decodes a schema from its IPC message header.
func decodeSchemaMessage(header []byte, mem memory.Allocator) (sc *arrow.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt schema message: %v", r)
		}
	}()
	r, err := ipc.NewReaderFromMessageReader(&oneMessage{header: header}, ipc.WithAllocator(mem))
	if err != nil {
		return nil, err
	}
	defer r.Release()
	return r.Schema(), nil
}

// oneMessage is an ipc.MessageReader of a single message.
type oneMessage struct {
	header []byte
	done   bool
}

func (o *oneMessage) Message() (*ipc.Message, error) {
	if o.done {
		return nil, io.EOF
	}
	o.done = true
	return ipc.NewMessage(memory.NewBufferBytes(o.header), memory.NewBufferBytes(nil)), nil
}

func (o *oneMessage) Retain()  {}
func (o *oneMessage) Release() {}

// oneLine renders a schema compactly for an error message.
func oneLine(sc *arrow.Schema) string {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range sc.Fields() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %s", f.Name, f.Type)
		if f.Nullable {
			b.WriteString(" nullable")
		}
	}
	b.WriteByte('}')
	return b.String()
}
