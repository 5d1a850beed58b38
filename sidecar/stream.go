package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// serverStream is a call's stream as its handler sees it. Its context is
// the call's (also cancelled when the shutdown grace ends), and no receive
// or send waits on the client for ever: the first message (for DoPut, its
// descriptor and schema) must arrive within stream_first_message_timeout
// of the call's start; every later receive, and every send, ends after
// stream_idle_timeout without progress. A stream whose receive or send was
// given up fails every later one with the same status: gRPC allows one
// receive and one send at a time, and the abandoned one ends only with
// the call.
//
// gRPC's Recv and Send cannot be given a deadline, so each waits in a
// goroutine of its own (one at a time per direction) while the handler
// waits for it, the timer or the call's context. When the handler has
// returned, gRPC ends the stream and the abandoned goroutine returns.
type serverStream struct {
	grpc.ServerStream
	ctx    context.Context
	s      *Server
	method string

	preamble bool      // the first message has not arrived yet
	firstBy  time.Time // when it must have arrived; zero: no limit
	recvs    int64     // messages received
	sends    int64     // messages sent
	recvT    *time.Timer
	sendT    *time.Timer
	broken   error // the status of the receive or send given up
}

func (s *Server) newServerStream(method string, ss grpc.ServerStream, ctx context.Context) *serverStream {
	st := &serverStream{ServerStream: ss, ctx: ctx, s: s, method: method, preamble: true}
	if s.firstTimeout > 0 {
		st.firstBy = time.Now().Add(s.firstTimeout)
	}
	return st
}

func (st *serverStream) Context() context.Context { return st.ctx }

// RecvMsg receives the next message within its time limit.
func (st *serverStream) RecvMsg(m any) error {
	if st.broken != nil {
		return st.broken
	}
	var d time.Duration
	switch {
	case st.preamble && !st.firstBy.IsZero():
		d = max(time.Until(st.firstBy), time.Nanosecond)
	case !st.preamble:
		d = st.s.idleTimeout
	}
	var err error
	if d <= 0 {
		err = st.ServerStream.RecvMsg(m)
	} else {
		if st.recvT == nil {
			st.recvT = time.NewTimer(d)
		} else {
			st.recvT.Reset(d)
		}
		err = st.bounded(st.recvT, func() error { return st.ServerStream.RecvMsg(m) }, st.recvExpired)
	}
	if err == nil {
		st.recvs++
		// A DoPut may send its descriptor alone before the schema; the
		// first message is complete with the first IPC message.
		if fd, ok := m.(*flight.FlightData); !ok || len(fd.DataHeader) > 0 {
			st.preamble = false
		}
	}
	return err
}

// SendMsg sends m, waiting at most stream_idle_timeout for the client to
// make room (gRPC flow control blocks a send to a client that does not
// read).
func (st *serverStream) SendMsg(m any) error {
	if st.broken != nil {
		return st.broken
	}
	d := st.s.idleTimeout
	if d <= 0 {
		return st.ServerStream.SendMsg(m)
	}
	if fd, ok := m.(*flight.FlightData); ok {
		// gRPC encodes m first thing; but should the send be given up
		// while it does, the IPC writer releases the header's buffer to
		// its allocator: the goroutine gets its own copy. The body is a
		// Go slice the writer does not reuse after a failed send.
		m = &flight.FlightData{FlightDescriptor: fd.FlightDescriptor, DataHeader: bytes.Clone(fd.DataHeader),
			AppMetadata: fd.AppMetadata, DataBody: fd.DataBody}
	}
	if st.sendT == nil {
		st.sendT = time.NewTimer(d)
	} else {
		st.sendT.Reset(d)
	}
	err := st.bounded(st.sendT, func() error { return st.ServerStream.SendMsg(m) }, st.sendExpired)
	if err == nil {
		st.sends++
	}
	return err
}

// bounded runs op in a goroutine and waits for it, for t, or for the
// call's context. A panic in op fails the call as the handler's would.
func (st *serverStream) bounded(t *time.Timer, op func() error, expired func() error) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- st.s.panicked(st.method, r)
			}
		}()
		done <- op()
	}()
	select {
	case err := <-done:
		t.Stop()
		return err
	case <-t.C:
		st.broken = expired()
	case <-st.ctx.Done():
		t.Stop()
		st.broken = toStatus(context.Cause(st.ctx))
	}
	return st.broken
}

func (st *serverStream) recvExpired() error {
	if st.preamble {
		what, tail := "its request", ""
		if st.method == "DoPut" {
			what = "its descriptor and schema"
			tail = "; nothing was committed. Send the schema with the descriptor at once (arrow-go: flight.NewRecordWriter with ipc.WithSchema, then Write or Close)"
		}
		return status.Errorf(codes.DeadlineExceeded, "%s did not send %s within %v (stream_first_message_timeout): the stream was closed%s",
			st.method, what, st.s.firstTimeout, tail)
	}
	tail := ""
	if st.method == "DoPut" {
		tail = `; nothing was committed. A client slower than that between batches can send metadata-only messages (not {"commit": ...}) to keep the stream alive`
	}
	return status.Errorf(codes.DeadlineExceeded, "%s sent no message for %v (stream_idle_timeout) after %d messages: the stream was closed%s",
		st.method, st.s.idleTimeout, st.recvs, tail)
}

func (st *serverStream) sendExpired() error {
	return status.Error(codes.DeadlineExceeded, fmt.Sprintf("%s: the client read nothing for %v (stream_idle_timeout) after %d messages sent: the stream was closed",
		st.method, st.s.idleTimeout, st.sends))
}
