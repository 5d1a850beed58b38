package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

// forEachBackend runs fn against the embedded server and against MinIO
// (or the server named by DURASHUFFLE_TEST_ENDPOINT).
func forEachBackend(t *testing.T, fn func(t *testing.T, ep testenv.Endpoint)) {
	for _, b := range []struct {
		name string
		ep   func(testing.TB) testenv.Endpoint
	}{{"embedded", testenv.Embedded}, {"minio", testenv.MinIO}} {
		t.Run(b.name, func(t *testing.T) { fn(t, b.ep(t)) })
	}
}

// TestPutSealGet: four workers DoPut concurrently, the stage is sealed
// with DoAction, and DoGet of every partition returns exactly the rows
// written to it, in the reader's order (workers ascending, then write
// order). Worker 0's output spans several parts, so both the multipart
// and the single-put paths run.
func TestPutSealGet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{})
		ctx := context.Background()
		const (
			query      = "q-e2e"
			stage      = 2
			workers    = 4
			partitions = 5
		)
		// want[p][w]: rows of partition p written by worker w, in order.
		want := make([][][]row, partitions)
		for p := range want {
			want[p] = make([][]row, workers)
		}
		var (
			wg      sync.WaitGroup
			results [workers]*flightclient.PutResult
			errs    [workers]error
		)
		for w := range workers {
			id := fmt.Sprint(w)
			nb, rows := 24, 500
			if w == 0 {
				nb, rows = 48, 2000 // ~9 MiB logical: more than one 5 MiB part
			}
			var bs []partBatch
			for b := range nb {
				rec, rs := genBatch(id, int32(b), rows+b, 64)
				p := (b*3 + w) % partitions
				want[p][w] = append(want[p][w], rs...)
				bs = append(bs, partBatch{p, rec})
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := flightclient.PutCommand{Query: query, Stage: stage, Worker: flightclient.WorkerID(id), Partitions: partitions}
				results[w], errs[w] = putWorker(ctx, e.sc, cmd, slices.Values(bs))
			}()
		}
		wg.Wait()
		for w := range workers {
			if errs[w] != nil {
				t.Fatalf("worker %d: %v", w, errs[w])
			}
			r := results[w]
			var n int64
			for p := range partitions {
				n += int64(len(want[p][w]))
			}
			if !r.Committed || r.Worker != fmt.Sprint(w) || r.Rows != n || r.Objects != 1 || r.BytesStored <= 0 || r.Attempt == "" {
				t.Errorf("worker %d: PutResult %+v, want committed with %d rows in 1 object", w, r, n)
			}
		}
		if results[0].Parts < 2 {
			t.Errorf("worker 0 stored %d bytes in %d parts, want a multipart upload", results[0].BytesStored, results[0].Parts)
		}
		t.Logf("worker 0: %d rows, %d bytes logical, %d stored in %d parts", results[0].Rows, results[0].BytesLogical, results[0].BytesStored, results[0].Parts)

		seal, err := e.sc.Seal(ctx, query, stage, workers)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, r := range results {
			total += r.Rows
		}
		if !seal.Sealed || seal.Rows != total || seal.Workers != workers || seal.Partitions != partitions {
			t.Fatalf("seal: %+v, want %d rows of %d workers", seal, total, workers)
		}

		for p := range partitions {
			schema, got, err := doGet(ctx, e.fc, map[string]any{"query": query, "stage": stage, "partition": p})
			if err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
			if !schema.Equal(testSchema) {
				t.Fatalf("partition %d: schema %s, want %s", p, schema, testSchema)
			}
			if exp := slices.Concat(want[p]...); !slices.Equal(got, exp) {
				t.Fatalf("partition %d: got %d rows, want %d (%s)", p, len(got), len(exp), firstDiff(got, exp))
			}
		}
		// A list of partitions streams them in ascending order.
		_, got, err := doGet(ctx, e.fc, map[string]any{"query": query, "stage": stage, "partitions": []int{3, 1}})
		if err != nil {
			t.Fatal(err)
		}
		if exp := slices.Concat(slices.Concat(want[1]...), slices.Concat(want[3]...)); !slices.Equal(got, exp) {
			t.Fatalf("partitions [3 1]: got %d rows, want %d (%s)", len(got), len(exp), firstDiff(got, exp))
		}

		// In storage order: the same rows, each batch labelled with its
		// partition; with partitions, only theirs.
		partOf := map[row]int{}
		for p := range partitions {
			for _, r := range slices.Concat(want[p]...) {
				partOf[r] = p
			}
		}
		for _, ps := range [][]int{nil, {3, 1}} {
			tkt := map[string]any{"query": query, "stage": stage, "order": "storage"}
			if ps != nil {
				tkt["partitions"] = ps
			}
			got := doGetLabelled(t, ctx, e.fc, tkt, partOf)
			var exp []row
			for p := range partitions {
				if ps == nil || slices.Contains(ps, p) {
					exp = append(exp, slices.Concat(want[p]...)...)
				}
			}
			if !sameRows(got, exp) {
				t.Fatalf("storage order, partitions %v: got %d rows, want the %d of those partitions", ps, len(got), len(exp))
			}
		}
		_, _, err = doGet(ctx, e.fc, map[string]any{"query": query, "stage": stage, "order": "random"})
		wantCode(t, err, codes.InvalidArgument, `ticket order "random"`)

		// GetFlightInfo and ListFlights describe the stage.
		info, err := e.fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{query, fmt.Sprint(stage)}})
		if err != nil {
			t.Fatal(err)
		}
		checkInfo(t, info, query, stage, partitions, total, want)
		lf, err := e.fc.ListFlights(ctx, &flight.Criteria{})
		if err != nil {
			t.Fatal(err)
		}
		var listed []*flight.FlightInfo
		for {
			fi, err := lf.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, fi)
		}
		if len(listed) != 1 {
			t.Fatalf("ListFlights: %d flights, want 1", len(listed))
		}
		checkInfo(t, listed[0], query, stage, partitions, total, want)

		// Every ticket of the FlightInfo works as is.
		var fromTickets int
		for _, ep := range info.Endpoint {
			stream, err := e.fc.DoGet(ctx, ep.Ticket)
			if err != nil {
				t.Fatal(err)
			}
			rdr, err := flight.NewRecordReader(stream)
			if err != nil {
				t.Fatal(err)
			}
			for rdr.Next() {
				fromTickets += int(rdr.RecordBatch().NumRows())
			}
			if err := rdr.Err(); err != nil {
				t.Fatal(err)
			}
			rdr.Release()
		}
		if int64(fromTickets) != total {
			t.Fatalf("DoGet of every endpoint: %d rows, want %d", fromTickets, total)
		}
	})
}

func checkInfo(t *testing.T, info *flight.FlightInfo, query string, stage, partitions int, total int64, want [][][]row) {
	t.Helper()
	if info.TotalRecords != total || info.TotalBytes <= 0 || len(info.Endpoint) != partitions || !info.Ordered {
		t.Fatalf("FlightInfo: %d records, %d bytes, %d endpoints, ordered %v; want %d records, %d endpoints",
			info.TotalRecords, info.TotalBytes, len(info.Endpoint), info.Ordered, total, partitions)
	}
	schema, err := flight.DeserializeSchema(info.Schema, memory.DefaultAllocator)
	if err != nil || !schema.Equal(testSchema) {
		t.Fatalf("FlightInfo schema %v (%v), want %s", schema, err, testSchema)
	}
	var md flightclient.StageMetadata
	if err := json.Unmarshal(info.AppMetadata, &md); err != nil || md.Query != query || md.Stage != stage || !md.Sealed || md.Rows != total {
		t.Fatalf("FlightInfo app_metadata %s (%v)", info.AppMetadata, err)
	}
	for p, ep := range info.Endpoint {
		var tk flightclient.Ticket
		if err := json.Unmarshal(ep.Ticket.Ticket, &tk); err != nil || tk.Query != query || tk.Stage != stage || tk.Partition == nil || *tk.Partition != p {
			t.Fatalf("endpoint %d: ticket %s (%v)", p, ep.Ticket.Ticket, err)
		}
		var pm flightclient.PartitionMetadata
		if err := json.Unmarshal(ep.AppMetadata, &pm); err != nil || pm.Partition != p || pm.Rows != int64(len(slices.Concat(want[p]...))) {
			t.Fatalf("endpoint %d: app_metadata %s (%v)", p, ep.AppMetadata, err)
		}
	}
}

func firstDiff(got, want []row) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at row %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}

// TestCancelledPut: a client that cancels its DoPut mid-stream, after the
// multipart upload has started, leaves no worker manifest, no data object
// and no open multipart upload.
func TestCancelledPut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{cfg: uploading})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const query, stage = "q-cancel", 0
		var b int32
		_, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: query, Stage: stage, Worker: "7", Attempt: "a1", Partitions: 4}, func(yield func(partBatch) bool) {
			for ; ; b++ {
				if e.counter.Requests()["UploadPart"] >= 1 {
					cancel() // mid-stream: the upload is under way
				}
				rec, _ := genBatch("7", b, 2000, 64)
				if !yield(partBatch{int(b+1) % 4, rec}) {
					return
				}
			}
		})
		wantCode(t, err, codes.Canceled)
		t.Logf("cancelled after %d batches, %v", b, e.counter.Requests())
		e.nothingLeft(query, stage, "7")
		// The client sees Canceled as soon as it cancels; the server logs
		// the abort when its cleanup is done, which may be a moment later.
		waitFor(t, "the abort to be logged", func() bool { return strings.Contains(e.logs.String(), "put aborted") })
	})
}

// TestRejectedPuts: bad IDs and partitions, malformed descriptors and
// app_metadata, and schema changes are InvalidArgument with a message that
// says which, and leave nothing.
func TestRejectedPuts(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	ctx := context.Background()
	other := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	rec := func(b int32) arrow.RecordBatch { r, _ := genBatch("w", b, 100, 8); return r }
	// What the typed client sends as asked: batch i to partition parts[i].
	refused := []struct {
		name  string
		cmd   flightclient.PutCommand
		parts []int
		frags []string
	}{
		{"partition out of range", flightclient.PutCommand{Query: "q-bad", Worker: "w", Partitions: 4}, []int{1, 9},
			[]string{"batch 1", "partition 9 is outside [0, 4)"}},
		{"negative partition", flightclient.PutCommand{Query: "q-bad", Worker: "w", Partitions: 4}, []int{-1},
			[]string{"partition -1 is outside [0, 4)"}},
		{"invalid query ID", flightclient.PutCommand{Query: "../etc", Worker: "w", Partitions: 4}, []int{0},
			[]string{"query ID"}},
		{"invalid worker ID", flightclient.PutCommand{Query: "q-bad", Worker: "a/b", Partitions: 4}, []int{0},
			[]string{"worker ID"}},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			_, err := putWorker(ctx, e.sc, c.cmd, func(yield func(partBatch) bool) {
				for i, p := range c.parts {
					if !yield(partBatch{p, rec(int32(i))}) {
						return
					}
				}
			})
			wantCode(t, err, codes.InvalidArgument, c.frags...)
		})
	}
	// What only a hand-made stream sends.
	cases := []struct {
		name  string
		cmd   any
		send  func(s flight.FlightService_DoPutClient, desc []byte) error
		bs    func() []putBatch
		code  codes.Code
		frags []string
	}{
		{name: "no app_metadata", cmd: putCmd("q-bad", 0, "w", "", 4),
			bs:   func() []putBatch { return []putBatch{{rec(0), nil}} },
			code: codes.InvalidArgument, frags: []string{"no app_metadata", `{"partition": N}`}},
		{name: "app_metadata not JSON", cmd: putCmd("q-bad", 0, "w", "", 4),
			bs:   func() []putBatch { return []putBatch{{rec(0), []byte("3")}} },
			code: codes.InvalidArgument, frags: []string{`not {"partition": N}`}},
		{name: "fractional partition", cmd: putCmd("q-bad", 0, "w", "", 4),
			bs:   func() []putBatch { return []putBatch{{rec(0), []byte(`{"partition": 1.5}`)}} },
			code: codes.InvalidArgument, frags: []string{"partition 1.5 is not an integer"}},
		{name: "fractional worker", cmd: putCmd("q-bad", 0, 1.5, "", 4),
			bs:   func() []putBatch { return []putBatch{{rec(0), partMD(0)}} },
			code: codes.InvalidArgument, frags: []string{"worker must be a string or a non-negative integer"}},
		{name: "unknown descriptor key", cmd: map[string]any{"query": "q", "stage": 0, "worker": "w", "partition": 4},
			bs:   func() []putBatch { return []putBatch{{rec(0), partMD(0)}} },
			code: codes.InvalidArgument, frags: []string{`unknown field "partition"`}},
		{name: "no stage", cmd: map[string]any{"query": "q", "worker": "w", "partitions": 4},
			bs:   func() []putBatch { return []putBatch{{rec(0), partMD(0)}} },
			code: codes.InvalidArgument, frags: []string{"no stage"}},
		{name: "no partitions", cmd: map[string]any{"query": "q", "stage": 0, "worker": "w"},
			bs:   func() []putBatch { return []putBatch{{rec(0), partMD(0)}} },
			code: codes.InvalidArgument, frags: []string{"partitions must be at least 1"}},
		{name: "schema change", cmd: putCmd("q-bad", 0, "w", "", 4),
			send: func(s flight.FlightService_DoPutClient, desc []byte) error {
				w1 := flight.NewRecordWriter(s, ipcSchema(testSchema))
				w1.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: desc})
				r := rec(0)
				defer r.Release()
				if err := w1.WriteWithAppMetadata(r, partMD(0)); err != nil {
					return err
				}
				w2 := flight.NewRecordWriter(s, ipcSchema(other))
				bld := newInt64Batch(other, 1, 2, 3)
				defer bld.Release()
				return w2.WriteWithAppMetadata(bld, partMD(1))
			},
			code: codes.InvalidArgument, frags: []string{"schema changed mid-stream after 1 batches", "x: int64"}},
		{name: "no schema", cmd: putCmd("q-bad", 0, "w", "", 4),
			send: func(s flight.FlightService_DoPutClient, desc []byte) error {
				return s.Send(&flight.FlightData{FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: desc}})
			},
			code: codes.InvalidArgument, frags: []string{"ended before its schema"}},
		{name: "PATH descriptor", cmd: nil,
			send: func(s flight.FlightService_DoPutClient, _ []byte) error {
				w := flight.NewRecordWriter(s, ipcSchema(testSchema))
				w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"q", "0"}})
				return w.Close()
			},
			code: codes.InvalidArgument, frags: []string{"type CMD"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.send == nil {
				_, err = doPut(ctx, e.fc, c.cmd, testSchema, batches(c.bs()))
			} else {
				err = rawPut(ctx, e.fc, c.cmd, c.send)
			}
			wantCode(t, err, c.code, c.frags...)
		})
	}
	e.nothingLeft("q-bad", 0, "w")
	if ups, err := e.raw.ListUploads(ctx, ""); err != nil || len(ups) > 0 {
		t.Fatalf("open uploads: %v %v", ups, err)
	}
}

// rawPut sends with send, half-closes and returns the stream's outcome.
func rawPut(ctx context.Context, c flight.Client, cmd any, send func(flight.FlightService_DoPutClient, []byte) error) error {
	s, err := c.DoPut(ctx)
	if err != nil {
		return err
	}
	desc, _ := json.Marshal(cmd)
	if err := send(s, desc); err != nil && err != io.EOF {
		return err
	}
	s.CloseSend()
	for {
		if _, err := s.Recv(); err != nil {
			if err == io.EOF {
				return fmt.Errorf("stream ended without an error")
			}
			return err
		}
	}
}

// TestPutOutcomes: AlreadyExists for a second attempt of a committed
// worker, an empty output, NotFound and InvalidArgument from DoGet, and
// the actions' failures.
func TestPutOutcomes(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{})
	ctx := context.Background()
	one := func(w string) partBatch {
		r, _ := genBatch(w, 0, 10, 4)
		return partBatch{1, r}
	}
	r1, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: "q-out", Worker: "1", Attempt: "a1", Partitions: 2}, slices.Values([]partBatch{one("1")}))
	if err != nil || !r1.Committed || r1.Attempt != "a1" {
		t.Fatalf("first attempt: %+v %v", r1, err)
	}
	// The worker as a JSON number, which the typed client does not send:
	// 1 is worker "1", whose attempt a1 has committed.
	_, err = doPut(ctx, e.fc, putCmd("q-out", 0, 1, "a2", 2), testSchema, rawBatches([]partBatch{one("1")}))
	wantCode(t, err, codes.AlreadyExists, "attempt a1 won, attempt a2 lost")
	// The loser's objects are gone; the winner's stay.
	objs, _, _ := e.raw.List(ctx, e.client.Layout().AttemptPrefix("q-out", 0, "1", "a2"), "")
	if len(objs) != 0 {
		t.Errorf("losing attempt left %v", objs)
	}

	// A worker with no rows commits an empty output with its schema.
	r0, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: "q-out", Worker: "0", Partitions: 2}, slices.Values([]partBatch(nil)))
	if err != nil || !r0.Committed || r0.Rows != 0 {
		t.Fatalf("empty output: %+v %v", r0, err)
	}
	// One partition: app_metadata may be left out (the typed client
	// always sends it).
	r, _ := genBatch("x", 0, 10, 4)
	if res, err := doPut(ctx, e.fc, putCmd("q-out", 1, "x", "", 1), testSchema, batches([]putBatch{{r, nil}})); err != nil || res.Rows != 10 {
		t.Fatalf("one partition without app_metadata: %+v %v", res, err)
	}

	_, err = e.sc.Seal(ctx, "q-out", 0, 3)
	wantCode(t, err, codes.FailedPrecondition, "1 of 3 workers have no manifest: 2")
	if _, err := e.sc.Seal(ctx, "q-out", 0, 2); err != nil {
		t.Fatal(err)
	}
	// Unsealed stages are served from their worker manifests.
	if _, rows, err := doGet(ctx, e.fc, map[string]any{"query": "q-out", "stage": 1, "partitions": []int{0}}); err != nil || len(rows) != 10 {
		t.Fatalf("unsealed stage: %d rows, %v", len(rows), err)
	}

	_, _, err = doGet(ctx, e.fc, map[string]any{"query": "q-out", "stage": 9, "partition": 0})
	wantCode(t, err, codes.NotFound, "stage not found")
	_, _, err = doGet(ctx, e.fc, map[string]any{"query": "q-out", "stage": 0, "partition": 2})
	wantCode(t, err, codes.InvalidArgument, "partition")
	// No partition, or an empty list, is every partition, as
	// ReadPartitions(ctx, nil) reads them.
	for _, tkt := range []map[string]any{
		{"query": "q-out", "stage": 0},
		{"query": "q-out", "stage": 0, "partitions": []int{}},
	} {
		_, all, err := doGet(ctx, e.fc, tkt)
		_, p0, err0 := doGet(ctx, e.fc, map[string]any{"query": "q-out", "stage": 0, "partition": 0})
		_, p1, err1 := doGet(ctx, e.fc, map[string]any{"query": "q-out", "stage": 0, "partition": 1})
		if err != nil || err0 != nil || err1 != nil || len(all) == 0 || len(all) != len(p0)+len(p1) {
			t.Fatalf("ticket %v: %d rows (%v), want partitions 0 and 1: %d + %d rows (%v, %v)", tkt, len(all), err, len(p0), len(p1), err0, err1)
		}
	}
	_, _, err = doGet(ctx, e.fc, map[string]any{"query": "q-out", "stage": 0, "partition": 0, "partitions": []int{1}})
	wantCode(t, err, codes.InvalidArgument, "both")
	_, err = e.fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(`{"query":"nope","stage":0}`)})
	wantCode(t, err, codes.NotFound)

	rep, err := e.sc.GC(ctx, 6*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals != (flightclient.GCTotals{}) || rep.Scanned.Stages == 0 || rep.Prefix != e.client.Layout().Root() {
		t.Fatalf("gc of young committed stages removed something or saw nothing: %+v", rep)
	}
	_, err = e.sc.GC(ctx, -time.Hour, 0)
	wantCode(t, err, codes.InvalidArgument, `older_than "-1h0m0s"`)
	// Bodies no time.Duration makes.
	for _, bad := range []string{"soon", ""} {
		err = doAction(ctx, e.fc, flightclient.ActionGC, map[string]any{"older_than": bad}, nil)
		wantCode(t, err, codes.InvalidArgument, "older_than")
	}
	err = doAction(ctx, e.fc, "drop-everything", map[string]any{}, nil)
	wantCode(t, err, codes.InvalidArgument, "unknown action", flightclient.ActionSealStage)
	la, err := e.fc.ListActions(ctx, &flight.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for {
		a, err := la.Recv()
		if err != nil {
			break
		}
		names = append(names, a.Type)
	}
	if !slices.Equal(names, []string{flightclient.ActionSealStage, flightclient.ActionDeleteQuery, flightclient.ActionGC, flightclient.ActionRelease, flightclient.ActionHeld, flightclient.ActionCombine, flightclient.ActionFetch}) {
		t.Fatalf("ListActions: %v", names)
	}

	del, err := e.sc.DeleteQuery(ctx, "q-out")
	if err != nil {
		t.Fatal(err)
	}
	if del.DeletedObjects < 5 {
		t.Errorf("delete-query: %+v", del)
	}
	objs, _, _ = e.raw.List(ctx, e.client.Layout().QueryPrefix("q-out"), "")
	if len(objs) != 0 {
		t.Fatalf("after delete-query: %v", objs)
	}
	_, _, err = doGet(ctx, e.fc, map[string]any{"query": "q-out", "stage": 0, "partition": 0})
	wantCode(t, err, codes.NotFound)
	if _, err := manifest.LoadWorker(ctx, e.raw, e.client.Layout(), "q-out", 0, "1"); err == nil {
		t.Fatal("worker manifest survived delete-query")
	}
}

// TestAuth: with auth_token set, a missing or wrong bearer token is
// Unauthenticated on every kind of call, the right one works, and the
// token never reaches the log. The sidecar listens on a unix socket.
func TestAuth(t *testing.T) {
	const token = "s3cr3t-t0ken-value"
	dir, err := os.MkdirTemp("", "ds-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := "unix:" + filepath.Join(dir, "flight.sock")
	e := newEnv(t, testenv.Embedded(t), envOptions{listen: sock, cfg: func(c *durashuffle.Config) { c.Sidecar.AuthToken = token }})
	if e.addr != sock {
		t.Fatalf("listening on %s, want %s", e.addr, sock)
	}
	ctx := context.Background()
	put := func(ctx context.Context) error {
		r, _ := genBatch("1", 0, 10, 4)
		_, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: "q-auth", Worker: "1", Partitions: 2}, slices.Values([]partBatch{{0, r}}))
		return err
	}
	list := func(ctx context.Context) error {
		s, err := e.fc.ListActions(ctx, &flight.Empty{})
		if err != nil {
			return err
		}
		for {
			if _, err := s.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	info := func(ctx context.Context) error {
		_, err := e.fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"q-auth", "0"}})
		return err
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		frag string
	}{
		{"missing", ctx, "missing"},
		{"wrong", withToken(ctx, "not-the-token"), "invalid bearer token"},
		{"prefix of the token", withToken(ctx, token[:5]), "invalid bearer token"},
		{"not bearer", metadataCtx(ctx, "Basic "+token), "not \"Bearer <token>\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantCode(t, put(c.ctx), codes.Unauthenticated, c.frag)
			wantCode(t, list(c.ctx), codes.Unauthenticated, c.frag)
			wantCode(t, info(c.ctx), codes.Unauthenticated, c.frag)
		})
	}
	good := withToken(ctx, token)
	if err := put(good); err != nil {
		t.Fatal(err)
	}
	if err := list(good); err != nil {
		t.Fatal(err)
	}
	if err := info(good); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.logs.String(), token) {
		t.Fatalf("the token is in the log:\n%s", e.logs)
	}
}

// doGetLabelled reads a ticket's stream whole and checks that every
// batch's app_metadata names the partition partOf gives its rows.
func doGetLabelled(t *testing.T, ctx context.Context, c flight.Client, ticket any, partOf map[row]int) []row {
	t.Helper()
	b, err := json.Marshal(ticket)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: b})
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	var rows []row
	for rdr.Next() {
		var md struct {
			Partition *int `json:"partition"`
		}
		if err := json.Unmarshal(rdr.LatestAppMetadata(), &md); err != nil || md.Partition == nil {
			t.Fatalf("batch app_metadata %q: %v", rdr.LatestAppMetadata(), err)
		}
		for _, r := range rowsOf(rdr.RecordBatch()) {
			if p, ok := partOf[r]; !ok || p != *md.Partition {
				t.Fatalf("row %+v of partition %d (known %v) in a batch labelled %d", r, p, ok, *md.Partition)
			}
			rows = append(rows, r)
		}
	}
	if err := rdr.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// sameRows says whether a and b hold the same rows, in any order.
func sameRows(a, b []row) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[row]int{}
	for _, r := range a {
		n[r]++
	}
	for _, r := range b {
		if n[r]--; n[r] < 0 {
			return false
		}
	}
	return true
}
