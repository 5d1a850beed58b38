package sidecar_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/ipcguard"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/hostile"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// The hostile-client suite: a client sends what a buggy Arrow writer or
// an attacker sends, as raw Flight messages (the Arrow writers of
// well-behaved clients cannot even encode these batches). Each test runs
// on the embedded server, MinIO and versitygw and checks that the stream
// fails with InvalidArgument naming the batch and the column, that
// nothing was committed and no upload is left open, and that the same
// server then takes a normal DoPut and serves it back.

// hostileCase returns the case of hostile.Cases named name.
func hostileCase(t *testing.T, name string) hostile.Case {
	t.Helper()
	for _, c := range hostile.Cases() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no hostile case %q", name)
	return hostile.Case{}
}

// refusedPut sends case c's stream as worker 0 of query (after one good
// batch, so the bad one is batch 1 of the stream) and checks the refusal,
// that nothing stays and that the server serves on.
func refusedPut(t *testing.T, ep testenv.Endpoint, c hostile.Case) {
	e := newEnv(t, ep, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	query := "hostile-" + strings.ReplaceAll(c.Name, " ", "-")
	msgs := hostile.Messages(c.Stream)
	if c.Column != "" {
		// A good batch first: the stream has something to lose.
		good := hostile.Messages(hostile.Stream(hostile.Schema, hostile.Good()))
		msgs = slices.Insert(msgs, 1, good[1])
	}
	batches, rows := int64(len(msgs)-1), int64(hostile.GoodRows*(len(msgs)-1))
	_, err := putMessages(ctx, e.fc, putCmd(query, 0, "0", "", 4), msgs, 4, commitMetadata(batches, rows))
	bad := fmt.Sprintf("write batch %d (%d rows) to partition %d", batches-1, hostile.GoodRows, (batches-1)%4)
	fragments := []string{bad, c.Want}
	if c.Column != "" {
		fragments = append(fragments, "column", c.Column)
	} else {
		fragments = append(fragments, "schema {}")
	}
	wantCode(t, err, codes.InvalidArgument, fragments...)
	t.Logf("refused: %v", err)
	e.nothingLeft(query, 0, "0")
	e.servesNormally(ctx, query+"-after")
}

// TestPutZeroColumnSchema: a DoPut whose schema has no columns, with a
// batch of 5 rows, is refused with InvalidArgument naming the batch and
// the schema (before: a nil pointer in the chunker's encoder ended the
// process).
func TestPutZeroColumnSchema(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { refusedPut(t, b.Start(t), hostileCase(t, "zero columns")) })
	}
}

// TestPutNegativeFirstOffset: a batch whose string column's offsets[0] is
// -20 is refused naming the batch, the column and the offset (before: a
// panic while the writer's lock was held; the deferred Abort deadlocked,
// the stream's slot leaked and SIGTERM could not end the process).
func TestPutNegativeFirstOffset(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { refusedPut(t, b.Start(t), hostileCase(t, "negative first offset")) })
	}
}

// TestPutListOffsetsPastChild: a list column whose last offset (99) is
// past its 14 child values is refused naming the batch and the column.
func TestPutListOffsetsPastChild(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { refusedPut(t, b.Start(t), hostileCase(t, "list offsets past the child")) })
	}
}

// TestPutDecreasingOffsetsNotCommitted: string and list offsets that
// decrease inside the batch (which never panicked: they were committed,
// and every DoGet of the partition then failed DataLoss "offsets
// decrease") are refused at DoPut; nothing is committed.
func TestPutDecreasingOffsetsNotCommitted(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ep := b.Start(t)
			for _, name := range []string{"string offsets decrease", "list offsets decrease"} {
				t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) { refusedPut(t, ep, hostileCase(t, name)) })
			}
		})
	}
}

// TestPutValuesNotTheirMetadata: a string that is not valid UTF-8 (a
// byte of an ASCII name set to 0xFF) and a null count that is not the
// validity bitmap's (2 stated, 1 in the bitmap) are refused naming the
// batch and the column; nothing is committed and the server serves on.
func TestPutValuesNotTheirMetadata(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ep := b.Start(t)
			for _, name := range []string{"string not utf8", "null count not the bitmap"} {
				t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) { refusedPut(t, ep, hostileCase(t, name)) })
			}
		})
	}
}

// TestPutFlippedBytes: 200 seeded byte flips (three bytes each) of a
// batch's IPC body, each its own DoPut stream to one server: each stream
// either fails with InvalidArgument, or commits and then reads back equal
// to what a reader of the same bytes decodes. When all have ended, one
// listing shows nothing of the refused ones (no object, no manifest) and
// no multipart upload open anywhere; no stream holds a slot; the server
// serves a normal DoPut. At least 15 are refused naming a column: the
// flips reach the offsets and the strings, so the test proves the check.
func TestPutFlippedBytes(t *testing.T) {
	const flips = 200
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b.Start(t), envOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			good := hostile.Stream(hostile.Schema, hostile.Good())
			counts := map[string]int{}
			var refused []string
			for seed := range uint64(flips) {
				query := fmt.Sprintf("flip-%d", seed)
				out, err := e.checkPut(ctx, query, hostile.Flip(good, seed, 3))
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				counts[out]++
				if out != outcomeCommitted {
					refused = append(refused, query)
				}
			}
			t.Logf("outcomes of %d flips: %v", flips, counts)
			// Checked once for all: a listing per flip would cost
			// seconds on the real servers.
			e.nothingLeftOf(ctx, refused)
			if n := gauge(t, e.m, metrics.SidecarStreams, nil); n != 0 {
				t.Errorf("%v streams still hold slots after the %d flips ended", n, flips)
			}
			if counts[outcomeRefusedColumn] < 15 {
				t.Fatalf("outcomes %v: fewer than 15 of %d flips refused naming a column", counts, flips)
			}
			e.servesNormally(ctx, "flips-after")
		})
	}
}

// TestPutSchemaHugeFieldCount: a 280-byte schema message whose fields
// vector says it holds 3,000,000,000 fields is refused with
// InvalidArgument naming the message and the count, before Arrow's
// reader sees it (before: the reader allocated the fields, about 250 GB,
// and the process died out of memory; the fuzzer found it).
func TestPutSchemaHugeFieldCount(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			refusedStream(t, b.Start(t), "huge-fields", hostile.HugeFieldCount(),
				"IPC message 0 (after 0 batches): malformed header", "3000000000 elements")
		})
	}
}

// TestPutCompressionBomb: an LZ4 batch whose first buffer says it holds
// 1 TiB uncompressed is refused with InvalidArgument naming the batch and
// the decode limit (before: Arrow's reader allocated the 1 TiB and the
// process died out of memory).
func TestPutCompressionBomb(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			refusedStream(t, b.Start(t), "bomb", hostile.CompressionBomb(),
				"read batch 0: malformed Arrow IPC data", "1099511627776 bytes", "coalesce_budget + 4 x max_message_bytes")
		})
	}
}

// refusedStream sends stream's messages as worker 0 of query (with the
// commit message counting one batch of GoodRows) and checks that it is
// refused with InvalidArgument saying every fragment, that nothing stays
// and that the server serves on.
func refusedStream(t *testing.T, ep testenv.Endpoint, query string, stream []byte, fragments ...string) {
	e := newEnv(t, ep, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := putMessages(ctx, e.fc, putCmd(query, 0, "0", "", 4), hostile.Messages(stream), 4, commitMetadata(1, hostile.GoodRows))
	wantCode(t, err, codes.InvalidArgument, fragments...)
	t.Logf("refused: %v", err)
	e.nothingLeft(query, 0, "0")
	e.servesNormally(ctx, query+"-after")
}

// Outcomes of checkPut.
const (
	outcomeCommitted     = "committed and read back"
	outcomeRefusedColumn = "refused naming a column"
	outcomeRefused       = "refused"
)

// putAndCheck is checkPut, failing the test on its error, and checking
// that a refused stream left nothing (nothingLeft).
func (e *env) putAndCheck(ctx context.Context, query string, stream []byte) string {
	e.t.Helper()
	out, err := e.checkPut(ctx, query, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	if out != outcomeCommitted {
		e.nothingLeft(query, 0, "0")
	}
	return out
}

// checkPut sends stream's messages as one DoPut of worker 0 of stage 0 of
// query (batch k to partition k%3), and checks what became of it: refused
// with InvalidArgument, or committed and read back (sealed, every
// partition by DoGet) equal to what a reader of the same messages
// decodes. It returns the outcome, for the caller's counts, or what went
// wrong. Safe to call from several goroutines; what a refused stream
// left is the caller's to check.
func (e *env) checkPut(ctx context.Context, query string, stream []byte) (string, error) {
	const partitions = 3
	msgs := hostile.Messages(stream)
	want, wantErr := decodeMessages(msgs)
	defer func() {
		for _, r := range want {
			r.Release()
		}
	}()
	var batches, rows int64
	for _, r := range want {
		batches++
		rows += r.NumRows()
	}
	res, err := putMessages(ctx, e.fc, putCmd(query, 0, "0", "", partitions), msgs, partitions, commitMetadata(batches, rows))
	if err != nil {
		code, msg := statusOf(err)
		if code != codes.InvalidArgument {
			return "", fmt.Errorf("%s: DoPut failed with %v, want InvalidArgument or a commit: %w", query, code, err)
		}
		if strings.Contains(msg, "invalid record batch") && strings.Contains(msg, "column ") {
			return outcomeRefusedColumn, nil
		}
		return outcomeRefused, nil
	}
	if wantErr != nil {
		// The server took what a reader of the same bytes refuses: it
		// must still read back whole, as many rows as it committed.
		e.t.Logf("%s: committed %d rows of a stream a reader refuses (%v)", query, res.Rows, wantErr)
	}
	if !res.Committed || res.Rows != rows && wantErr == nil {
		return "", fmt.Errorf("%s: PutResult %+v, want committed with %d rows", query, res, rows)
	}
	if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": query, "stage": 0, "workers": 1}, nil); err != nil {
		return "", fmt.Errorf("%s: seal a committed stage: %w", query, err)
	}
	var read int64
	for p := range partitions {
		got, err := doGetRows(ctx, e.fc, map[string]any{"query": query, "stage": 0, "partition": p})
		if err != nil {
			return "", fmt.Errorf("%s: DoGet of partition %d of a committed stage: %w", query, p, err)
		}
		read += int64(len(got))
		if wantErr != nil {
			continue
		}
		var exp []string
		for k, r := range want {
			if k%partitions == p {
				exp = append(exp, rowStrings(r)...)
			}
		}
		if !slices.Equal(got, exp) {
			return "", fmt.Errorf("%s: partition %d read back %d rows %.300q, want %d %.300q", query, p, len(got), got, len(exp), exp)
		}
	}
	if read != res.Rows {
		return "", fmt.Errorf("%s: read back %d rows, committed %d", query, read, res.Rows)
	}
	return outcomeCommitted, nil
}

// servesNormally checks the server takes a normal DoPut (of query),
// commits it, seals the stage and serves it back by DoGet.
func (e *env) servesNormally(ctx context.Context, query string) {
	e.t.Helper()
	rec, want := genBatch("0", 0, 300, 16)
	res, err := doPut(ctx, e.fc, putCmd(query, 0, "0", "", 2), testSchema, batches([]putBatch{{rec: rec, md: partMD(1)}}))
	if err != nil || !res.Committed || res.Rows != 300 {
		e.t.Fatalf("a normal DoPut after the hostile one: %+v, %v", res, err)
	}
	if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": query, "stage": 0, "workers": 1}, nil); err != nil {
		e.t.Fatal(err)
	}
	_, got, err := doGet(ctx, e.fc, map[string]any{"query": query, "stage": 0, "partition": 1})
	if err != nil || !slices.Equal(got, want) {
		e.t.Fatalf("DoGet after the hostile DoPut: %d rows, %v; want the %d written", len(got), err, len(want))
	}
}

// putMessages sends IPC messages as a DoPut: the first (the schema) with
// the descriptor cmd, record batch k with app_metadata
// {"partition": k % partitions} (other messages, such as dictionaries,
// without), then a commit message with app_metadata commit. A server that fails the stream makes Send fail with
// io.EOF; the status then comes from Recv.
func putMessages(ctx context.Context, c flight.Client, cmd any, msgs []hostile.Message, partitions int, commit []byte) (flightclient.PutResult, error) {
	var res flightclient.PutResult
	stream, err := c.DoPut(ctx)
	if err != nil {
		return res, err
	}
	desc, err := json.Marshal(cmd)
	if err != nil {
		return res, err
	}
	send := func() error {
		if len(msgs) == 0 {
			// No schema: the descriptor alone.
			return stream.Send(&flight.FlightData{FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: desc}})
		}
		var k int // record batches sent
		for i, m := range msgs {
			fd := &flight.FlightData{DataHeader: m.Header, DataBody: m.Body}
			switch {
			case i == 0:
				fd.FlightDescriptor = &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: desc}
			case m.Type() == ipc.MessageRecordBatch:
				fd.AppMetadata = partMD(k % partitions)
				k++
			}
			if err := stream.Send(fd); err != nil {
				return err
			}
		}
		return stream.Send(&flight.FlightData{AppMetadata: commit})
	}
	return finishPut(stream, send())
}

// decodeMessages decodes IPC messages the way the sidecar reads a DoPut
// (each header checked first, then Arrow's reader over the messages with
// the sidecar's bounded allocator, repeats of the first schema message
// skipped): the batches it yields before its first error, and that error.
func decodeMessages(msgs []hostile.Message) ([]arrow.RecordBatch, error) {
	if len(msgs) == 0 {
		return nil, errors.New("no schema message")
	}
	mr := &messageList{}
	var refused error
	for k, m := range msgs {
		if err := ipcguard.CheckHeader(m.Header); err != nil {
			refused = fmt.Errorf("message %d: %w", k, err)
			break
		}
		if k > 0 && string(m.Header) == string(msgs[0].Header) {
			continue
		}
		mr.msgs = append(mr.msgs, m)
	}
	// The sidecar's limit with newEnv's configuration: coalesce_budget
	// (1 MiB) + 4 x max_message_bytes (64 MiB).
	r, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(ipcguard.NewAllocator(memory.DefaultAllocator, 257<<20, "the reference decoder holds")))
	if err != nil {
		return nil, errors.Join(err, refused)
	}
	defer r.Release()
	var out []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		out = append(out, rec)
	}
	if err := r.Err(); err != nil {
		return out, err
	}
	return out, refused
}

// messageList is an ipc.MessageReader of a list of messages.
type messageList struct{ msgs []hostile.Message }

func (l *messageList) Message() (*ipc.Message, error) {
	if len(l.msgs) == 0 {
		return nil, io.EOF
	}
	m := l.msgs[0]
	l.msgs = l.msgs[1:]
	return ipc.NewMessage(memory.NewBufferBytes(m.Header), memory.NewBufferBytes(m.Body)), nil
}

func (l *messageList) Retain()  {}
func (l *messageList) Release() {}

// doGetRows reads a ticket's stream whole, of any schema, as rowStrings.
func doGetRows(ctx context.Context, c flight.Client, ticket any) ([]string, error) {
	b, err := json.Marshal(ticket)
	if err != nil {
		return nil, err
	}
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: b})
	if err != nil {
		return nil, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	var rows []string
	for rdr.Next() {
		rows = append(rows, rowStrings(rdr.RecordBatch())...)
	}
	return rows, rdr.Err()
}

// rowStrings renders each row of rec, its values separated by tabs: a
// comparison of any schema, batch boundaries aside.
func rowStrings(rec arrow.RecordBatch) []string {
	out := make([]string, rec.NumRows())
	for i := range out {
		var b strings.Builder
		for c := range int(rec.NumCols()) {
			if c > 0 {
				b.WriteByte('\t')
			}
			col := rec.Column(c)
			if ext, ok := col.(array.ExtensionArray); ok {
				// An extension type need not implement ValueStr (arrow-go's
				// opaque type panics): its storage's values stand for it.
				col = ext.Storage()
			}
			b.WriteString(col.ValueStr(i))
		}
		out[i] = b.String()
	}
	return out
}

// statusOf is err's gRPC code and message.
func statusOf(err error) (codes.Code, string) {
	s, _ := status.FromError(err)
	return s.Code(), s.Message()
}
