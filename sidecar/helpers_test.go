package sidecar_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/sidecar"
	"github.com/durashuffle/durashuffle/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is a sidecar on a fresh bucket, served on loopback, with a Flight
// client connected to it.
type env struct {
	t       testing.TB
	cfg     durashuffle.Config
	raw     store.Store // no retries, no delays: for checking what is stored
	counter *store.Counter
	client  *durashuffle.Client
	m       *metrics.Metrics
	srv     *sidecar.Server
	addr    string // Flight address, for clients
	httpURL string
	logs    *syncBuffer
	fc      flight.Client        // for what the typed client cannot send
	sc      *flightclient.Client // the typed client, over fc
}

type envOptions struct {
	cfg  func(*durashuffle.Config)
	wrap func(store.Store) store.Store // around the raw store, under the retry layer
	// transport wraps the S3 store's HTTP transport (a request audit).
	transport func(http.RoundTripper) http.RoundTripper
	listen    string // default 127.0.0.1:0
	bucket    string // default the endpoint's
	// cutOff: the test expects Shutdown to cut streams off, so the
	// cleanup's Shutdown (which returns the same result) is no failure.
	cutOff bool
}

func newEnv(t testing.TB, ep testenv.Endpoint, o envOptions) *env {
	t.Helper()
	// Spare connections the S3 transport parks would keep the embedded
	// server's shutdown waiting; close them first (cleanups run LIFO).
	hc := &http.Client{Transport: ep.Transport(t)}
	if o.transport != nil {
		hc.Transport = o.transport(hc.Transport)
	}
	t.Cleanup(hc.CloseIdleConnections)
	counter := new(store.Counter)
	so := ep.Options(counter)
	so.HTTPClient = hc
	if o.bucket != "" {
		so.Bucket = o.bucket
	}
	raw, err := s3store.New(context.Background(), so)
	if err != nil {
		t.Fatal(err)
	}
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket = so.Bucket
	cfg.Store.Prefix = "sc"
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Write.UploadConcurrency = 4
	cfg.Write.FrameTargetBytes = 64 * durashuffle.KiB
	cfg.Write.CoalesceBudget = 1 * durashuffle.MiB
	cfg.Write.EncodeConcurrency = 2
	cfg.Store.RetryBaseDelay = durashuffle.Duration(time.Millisecond)
	cfg.Store.RetryMaxDelay = durashuffle.Duration(10 * time.Millisecond)
	cfg.Sidecar.Listen = "127.0.0.1:0"
	cfg.Sidecar.MetricsListen = "127.0.0.1:0"
	if o.listen != "" {
		cfg.Sidecar.Listen = o.listen
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var st store.Store = raw
	if o.wrap != nil {
		st = o.wrap(raw)
	}
	e := &env{t: t, cfg: cfg, raw: raw, counter: counter, logs: &syncBuffer{}}
	e.m = metrics.New()
	e.client = testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter), durashuffle.WithObserver(e.m))
	t.Cleanup(e.client.Close)
	e.srv, err = sidecar.New(e.client, sidecar.WithReadyInterval(sidecar.Options{
		Logger:  slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: e.m,
	}, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := sidecar.Listen(cfg.Sidecar.Listen)
	if err != nil {
		t.Fatal(err)
	}
	hln, err := net.Listen("tcp", cfg.Sidecar.MetricsListen)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 2)
	go func() { served <- e.srv.Serve(ln) }()
	go func() { served <- e.srv.ServeMetrics(hln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil && !o.cutOff {
			t.Errorf("shutdown: %v", err)
		}
		for range 2 {
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	e.addr = ln.Addr().String()
	if ln.Addr().Network() == "unix" {
		e.addr = "unix:" + e.addr
	}
	e.httpURL = "http://" + hln.Addr().String()
	if cfg.Sidecar.TLSCertFile != "" {
		// The test dials with the credentials it is about.
		e.httpURL = "https://" + hln.Addr().String()
		return e
	}
	e.fc = e.dial()
	e.sc = flightclient.Wrap(e.fc, "")
	return e
}

// dial returns a new Flight client of the sidecar, closed with the test.
func (e *env) dial() flight.Client {
	e.t.Helper()
	c, err := flightclient.Dial(e.addr, flightclient.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c.Flight()
}

// withToken adds the bearer token to ctx's outgoing metadata.
func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// syncBuffer collects output from other goroutines while the test reads it.
type syncBuffer = testenv.SyncBuffer

// testSchema has fixed and variable width columns and nulls.
var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "worker", Type: arrow.BinaryTypes.String},
	{Name: "batch", Type: arrow.PrimitiveTypes.Int32},
	{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
	{Name: "val", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "payload", Type: arrow.BinaryTypes.String},
}, nil)

// row is one row of testSchema, comparable.
type row struct {
	Worker  string
	Batch   int32
	Seq     int64
	Val     float64
	Null    bool
	Payload string
}

// genBatch makes batch b of worker w: rows rows whose values are a
// function of (w, b, i). payload bytes of pseudo-random hex keep the
// data from compressing to nothing.
func genBatch(w string, b int32, rows, payload int) (arrow.RecordBatch, []row) {
	bld := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer bld.Release()
	rng := rand.New(rand.NewPCG(uint64(len(w))<<32|uint64(b), uint64(w[0])))
	out := make([]row, rows)
	hex := make([]byte, payload)
	const digits = "0123456789abcdef"
	for i := range rows {
		r := row{Worker: w, Batch: b, Seq: int64(b)*1_000_000 + int64(i), Val: rng.Float64(), Null: i%13 == 0}
		for j := range hex {
			hex[j] = digits[rng.IntN(16)]
		}
		r.Payload = string(hex)
		if r.Null {
			r.Val = 0
		}
		out[i] = r
		bld.Field(0).(*array.StringBuilder).Append(r.Worker)
		bld.Field(1).(*array.Int32Builder).Append(r.Batch)
		bld.Field(2).(*array.Int64Builder).Append(r.Seq)
		if r.Null {
			bld.Field(3).AppendNull()
		} else {
			bld.Field(3).(*array.Float64Builder).Append(r.Val)
		}
		bld.Field(4).(*array.StringBuilder).Append(r.Payload)
	}
	return bld.NewRecordBatch(), out
}

// rowsOf extracts the rows of a testSchema batch.
func rowsOf(rec arrow.RecordBatch) []row {
	w := rec.Column(0).(*array.String)
	b := rec.Column(1).(*array.Int32)
	s := rec.Column(2).(*array.Int64)
	v := rec.Column(3).(*array.Float64)
	p := rec.Column(4).(*array.String)
	out := make([]row, rec.NumRows())
	for i := range out {
		out[i] = row{Worker: w.Value(i), Batch: b.Value(i), Seq: s.Value(i), Null: v.IsNull(i), Payload: p.Value(i)}
		if !out[i].Null {
			out[i].Val = v.Value(i)
		}
	}
	return out
}

// partBatch is a batch of testSchema and the partition putWorker writes
// it to.
type partBatch struct {
	p   int
	rec arrow.RecordBatch
}

// putWorker puts one worker's output through the typed client: it writes
// each batch of bs to its partition, releasing it, and commits. No
// batches: an empty output. The first failure ends the stream (the
// sidecar then commits nothing) and is returned with the sidecar's status.
func putWorker(ctx context.Context, c *flightclient.Client, cmd flightclient.PutCommand, bs iter.Seq[partBatch]) (*flightclient.PutResult, error) {
	w, err := c.Put(ctx, cmd, testSchema)
	if err != nil {
		return nil, err
	}
	defer w.Abort()
	for b := range bs {
		err := w.Write(b.p, b.rec)
		b.rec.Release()
		if err != nil {
			return nil, err
		}
	}
	return w.Commit()
}

// The raw helpers below speak DoPut by hand, for what the typed client
// cannot send: descriptors that are not a PutCommand (JSON numbers,
// missing or unknown keys), batches without or with malformed
// app_metadata, wrong or missing commit messages.

// putBatch is a batch and the app_metadata it is sent with (nil: none).
type putBatch struct {
	rec arrow.RecordBatch
	md  []byte
}

func partMD(p int) []byte { return []byte(fmt.Sprintf(`{"partition": %d}`, p)) }

// putCmd is DoPut's descriptor as a map, so tests can send any JSON.
func putCmd(query string, stage int, worker any, attempt string, partitions int) map[string]any {
	m := map[string]any{"query": query, "stage": stage, "worker": worker, "partitions": partitions}
	if attempt != "" {
		m["attempt"] = attempt
	}
	return m
}

// doPut streams batches (from next, until it returns false) under the
// descriptor, ends with the commit message and returns the PutResult. A
// server that rejects the stream mid-way makes Send fail with io.EOF; the
// status then comes from Recv.
func doPut(ctx context.Context, c flight.Client, cmd any, schema *arrow.Schema, next func() (putBatch, bool)) (flightclient.PutResult, error) {
	return doPutCommit(ctx, c, cmd, schema, next, commitMetadata)
}

// doPutCommit is doPut with the commit message's app_metadata made by
// commit from the batches and rows sent; a nil commit sends none.
func doPutCommit(ctx context.Context, c flight.Client, cmd any, schema *arrow.Schema, next func() (putBatch, bool), commit func(batches, rows int64) []byte) (flightclient.PutResult, error) {
	var res flightclient.PutResult
	stream, err := c.DoPut(ctx)
	if err != nil {
		return res, err
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return res, err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(schema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: b})
	var sent, rows int64
	sendErr := func() error {
		for {
			pb, ok := next()
			if !ok {
				if err := w.Close(); err != nil || commit == nil {
					return err
				}
				return w.WriteMetadata(commit(sent, rows))
			}
			n := pb.rec.NumRows()
			err := w.WriteWithAppMetadata(pb.rec, pb.md)
			pb.rec.Release()
			if err != nil {
				return err
			}
			sent++
			rows += n
		}
	}()
	return finishPut(stream, sendErr)
}

// finishPut ends a DoPut whose sending ended with sendErr: it half-closes
// the stream and reads the one PutResult and the end of the stream. A
// server that rejected the stream mid-way made Send fail with io.EOF; the
// status then comes from Recv.
func finishPut(stream flight.FlightService_DoPutClient, sendErr error) (flightclient.PutResult, error) {
	var res flightclient.PutResult
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		return res, sendErr
	}
	if err := stream.CloseSend(); err != nil {
		return res, err
	}
	pr, err := stream.Recv()
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(pr.GetAppMetadata(), &res); err != nil {
		return res, fmt.Errorf("PutResult app_metadata %q: %w", pr.GetAppMetadata(), err)
	}
	// The server ends the stream after its one PutResult.
	if _, err := stream.Recv(); err != io.EOF {
		return res, fmt.Errorf("after the PutResult: want EOF, got %v", err)
	}
	return res, nil
}

// rawBatches is doPut's iterator of bs, each batch's app_metadata naming
// its partition as the typed client's would.
func rawBatches(bs []partBatch) func() (putBatch, bool) {
	raw := make([]putBatch, len(bs))
	for i, b := range bs {
		raw[i] = putBatch{b.rec, partMD(b.p)}
	}
	return batches(raw)
}

// batches turns a slice into doPut's iterator.
func batches(bs []putBatch) func() (putBatch, bool) {
	i := 0
	return func() (putBatch, bool) {
		if i == len(bs) {
			return putBatch{}, false
		}
		i++
		return bs[i-1], true
	}
}

// doGet reads a ticket's stream whole.
func doGet(ctx context.Context, c flight.Client, ticket any) (*arrow.Schema, []row, error) {
	b, err := json.Marshal(ticket)
	if err != nil {
		return nil, nil, err
	}
	rdr, err := flightclient.Wrap(c, "").GetTicket(ctx, &flight.Ticket{Ticket: b})
	if err != nil {
		return nil, nil, err
	}
	defer rdr.Release()
	var rows []row
	for rdr.Next() {
		rows = append(rows, rowsOf(rdr.RecordBatch())...)
	}
	return rdr.Schema(), rows, rdr.Err()
}

// doAction runs an action and decodes its one result into out (if
// non-nil), through the untyped Action: for bodies and action types the
// typed methods cannot send.
func doAction(ctx context.Context, c flight.Client, typ string, body any, out any) error {
	return flightclient.Wrap(c, "").Action(ctx, typ, body, out)
}

// wantCode fails the test unless err is a status with code and a message
// containing every fragment.
func wantCode(t *testing.T, err error, code codes.Code, fragments ...string) {
	t.Helper()
	s, _ := status.FromError(err)
	if err == nil || s.Code() != code {
		t.Fatalf("got %v (code %v), want code %v", err, status.Code(err), code)
	}
	for _, f := range fragments {
		if !strings.Contains(s.Message(), f) {
			t.Errorf("message %q does not contain %q", s.Message(), f)
		}
	}
}

// nothingLeft checks the stage holds no worker manifest for worker, no
// objects of any attempt, and that no multipart upload is open under it,
// polling up to 10 s for the server to finish aborting.
func (e *env) nothingLeft(query string, stage int, worker string) {
	e.t.Helper()
	l := e.client.Layout()
	ctx := context.Background()
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for {
		ups, err := e.raw.ListUploads(ctx, l.StagePrefix(query, stage))
		if err != nil {
			e.t.Fatal(err)
		}
		objs, _, err := e.raw.List(ctx, l.StagePrefix(query, stage)+"worker-"+worker+"/", "")
		if err != nil {
			e.t.Fatal(err)
		}
		_, merr := manifest.LoadWorker(ctx, e.raw, l, query, stage, worker)
		if len(ups) == 0 && len(objs) == 0 && store.IsNotFound(merr) {
			return
		}
		last = fmt.Sprintf("%d open uploads %v, %d objects %v, worker manifest: %v", len(ups), ups, len(objs), objs, merr)
		if time.Now().After(deadline) {
			e.t.Fatalf("%s stage %d worker %s: after 10 s still %s", query, stage, worker, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ipcSchema(s *arrow.Schema) ipc.Option { return ipc.WithSchema(s) }

// newInt64Batch is a one-column batch of vals.
func newInt64Batch(s *arrow.Schema, vals ...int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues(vals, nil)
	return b.NewRecordBatch()
}

func metadataCtx(ctx context.Context, authorization string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
}

// commitMetadata is the app_metadata of a DoPut's commit message for
// batches record batches holding rows rows, as a client of the protocol
// writes it.
func commitMetadata(batches, rows int64) []byte {
	b, err := json.Marshal(flightclient.CommitMessage{Commit: &flightclient.CommitCounts{Batches: &batches, Rows: &rows}})
	if err != nil {
		panic(err)
	}
	return b
}
