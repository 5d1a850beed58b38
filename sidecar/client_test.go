package sidecar_test

import (
	"bytes"
	"context"
	"io"
	"math"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

// TestFlightClient runs every call of the public client against a
// sidecar with a bearer token and a memory store: put with commit, get,
// describe and list, seal, held, fetch, release and delete-query; and
// the statuses of failed calls reach the caller as they are.
func TestFlightClient(t *testing.T) {
	const token = "client-token-0123456789"
	e := newEnv(t, testenv.Embedded(t), envOptions{cfg: func(c *durashuffle.Config) {
		c.Sidecar.MemoryStoreBytes = 64 * durashuffle.MiB
		c.Sidecar.AuthToken = token
	}})
	c, err := flightclient.Dial(e.addr, flightclient.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const query, partitions = "q-client", 3

	// Put: two workers, each batch to a partition of its own choosing.
	want := make([][]row, partitions)
	for w, worker := range []string{"0", "1"} {
		pw, err := c.Put(ctx, flightclient.PutCommand{Query: query, Stage: 0, Worker: flightclient.WorkerID(worker), Attempt: "a", Partitions: partitions}, testSchema)
		if err != nil {
			t.Fatal(err)
		}
		var rows int64
		for b := range 4 {
			rec, rs := genBatch(worker, int32(b), 500, 32)
			p := (b + w) % partitions
			if err := pw.Write(p, rec); err != nil {
				t.Fatalf("worker %s batch %d: %v", worker, b, err)
			}
			rec.Release()
			want[p] = append(want[p], rs...)
			rows += int64(len(rs))
		}
		res, err := pw.Commit()
		if err != nil {
			t.Fatalf("worker %s: commit: %v", worker, err)
		}
		if !res.Committed || res.Worker != worker || res.Attempt != "a" || res.Batches != 4 || res.Rows != rows {
			t.Fatalf("worker %s: PutResult %+v, want 4 batches and %d rows committed", worker, res, rows)
		}
	}

	// Another attempt of a committed worker loses: AlreadyExists.
	pw, err := c.Put(ctx, flightclient.PutCommand{Query: query, Stage: 0, Worker: "0", Attempt: "b", Partitions: partitions}, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := genBatch("0", 9, 10, 8)
	err = pw.Write(0, rec)
	rec.Release()
	if err == nil {
		_, err = pw.Commit()
	}
	wantCode(t, err, codes.AlreadyExists)
	// Aborted, a stream commits nothing.
	pw, err = c.Put(ctx, flightclient.PutCommand{Query: query, Stage: 0, Worker: "2", Partitions: partitions}, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ = genBatch("2", 0, 10, 8)
	if err := pw.Write(1, rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	pw.Abort()
	e.nothingLeft(query, 0, "2")

	seal, err := c.Seal(ctx, query, 0, 2)
	if err != nil || !seal.Sealed || seal.Workers != 2 || seal.Partitions != partitions || seal.Key == "" {
		t.Fatalf("seal: %+v, %v", seal, err)
	}

	// Get: partitions 2 and 0, each batch naming its partition.
	rdr, err := c.Get(ctx, flightclient.Ticket{Query: query, Stage: 0, Partitions: []int{2, 0}})
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]row, partitions)
	for rdr.Next() {
		p, err := rdr.Partition()
		if err != nil {
			t.Fatal(err)
		}
		got[p] = append(got[p], rowsOf(rdr.RecordBatch())...)
	}
	if err := rdr.Err(); err != nil {
		t.Fatal(err)
	}
	if !rdr.Schema().Equal(testSchema) {
		t.Fatalf("schema %s, want %s", rdr.Schema(), testSchema)
	}
	rdr.Release()
	for _, p := range []int{0, 2} {
		if !sameRows(got[p], want[p]) {
			t.Fatalf("partition %d: %d rows, want %d, or other rows", p, len(got[p]), len(want[p]))
		}
	}
	if len(got[1]) != 0 {
		t.Fatalf("partition 1 was not asked for, got %d rows", len(got[1]))
	}

	// Describe and List agree with what was put; an endpoint's ticket
	// reads its partition.
	info, err := c.Describe(ctx, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, w := range want {
		total += int64(len(w))
	}
	if !info.Sealed || info.Workers != 2 || info.Rows != total || len(info.Partitions) != partitions || !info.Schema.Equal(testSchema) {
		t.Fatalf("describe: %+v, want sealed, 2 workers, %d rows, %d partitions", info.StageMetadata, total, partitions)
	}
	for p, pm := range info.Partitions {
		if pm.Partition != p || pm.Rows != int64(len(want[p])) {
			t.Fatalf("describe: partition %d: %+v, want %d rows", p, pm, len(want[p]))
		}
	}
	rdr, err = c.GetTicket(ctx, info.Info.Endpoint[1].Ticket)
	if err != nil {
		t.Fatal(err)
	}
	var one []row
	for rdr.Next() {
		one = append(one, rowsOf(rdr.RecordBatch())...)
	}
	rdr.Release()
	if !sameRows(one, want[1]) {
		t.Fatalf("endpoint 1's ticket: %d rows, want %d", len(one), len(want[1]))
	}
	list, err := c.List(ctx, query)
	if err != nil || len(list) != 1 || list[0].Query != query || list[0].Stage != 0 || list[0].Rows != total {
		t.Fatalf("list: %v, %v; want the one stage", list, err)
	}

	// Held and fetch: the memory store holds both workers, and a fetch
	// answers the bytes the object store has.
	held, err := c.Held(ctx, query, 0)
	if err != nil || len(held.Workers) != 2 || held.HeldBytes == 0 {
		t.Fatalf("held: %+v, %v; want 2 workers", held, err)
	}
	l := e.client.Layout()
	wm, err := manifest.LoadWorker(ctx, e.raw, l, query, 0, "1")
	if err != nil {
		t.Fatal(err)
	}
	obj := wm.Objects[0]
	n := min(obj.Size, 3*flightclient.MaxResultBytes/2)
	b, err := c.Fetch(ctx, flightclient.FetchRequest{Query: query, Stage: 0, Worker: "1", Attempt: wm.Attempt, Object: 0, Offset: 0, Length: n})
	if err != nil {
		t.Fatal(err)
	}
	body, err := e.raw.GetRange(ctx, l.StagePrefix(query, 0)+obj.Key, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := io.ReadAll(body)
	body.Close()
	if err != nil || !bytes.Equal(b, stored) {
		t.Fatalf("fetch: %d bytes, equal to the stored %d: %v (%v)", len(b), len(stored), bytes.Equal(b, stored), err)
	}
	_, err = c.Fetch(ctx, flightclient.FetchRequest{Query: query, Stage: 0, Worker: "1", Attempt: "other", Length: 1})
	wantCode(t, err, codes.NotFound)
	// Ranges past the object, or whose end passes int64, or a negative
	// offset: refused, never answered with no bytes.
	_, err = c.Fetch(ctx, flightclient.FetchRequest{Query: query, Stage: 0, Worker: "1", Attempt: wm.Attempt, Offset: math.MaxInt64 - 10, Length: 100})
	wantCode(t, err, codes.NotFound)
	_, err = c.Fetch(ctx, flightclient.FetchRequest{Query: query, Stage: 0, Worker: "1", Attempt: wm.Attempt, Offset: obj.Size - 1, Length: 2})
	wantCode(t, err, codes.NotFound)
	_, err = c.Fetch(ctx, flightclient.FetchRequest{Query: query, Stage: 0, Worker: "1", Attempt: wm.Attempt, Offset: -1, Length: 2})
	wantCode(t, err, codes.InvalidArgument, "offset -1")
	_, err = c.Held(ctx, query, -5)
	wantCode(t, err, codes.InvalidArgument, "stage -5")

	rel, err := c.Release(ctx, query, 0)
	if err != nil || rel.Workers != 2 || rel.BytesReleased == 0 {
		t.Fatalf("release: %+v, %v; want 2 workers", rel, err)
	}
	if held, err = c.Held(ctx, query, flightclient.AllStages); err != nil || len(held.Workers) != 0 {
		t.Fatalf("held after release: %+v, %v; want none", held, err)
	}

	del, err := c.DeleteQuery(ctx, query)
	if err != nil || del.DeletedObjects == 0 {
		t.Fatalf("delete-query: %+v, %v", del, err)
	}
	_, err = c.Describe(ctx, query, 0)
	wantCode(t, err, codes.NotFound)
	_, err = c.Get(ctx, flightclient.Ticket{Query: query, Stage: 0, Partitions: []int{0}})
	wantCode(t, err, codes.NotFound)
	_, err = c.Seal(ctx, query, 0, 0)
	wantCode(t, err, codes.InvalidArgument, "workers")
	_, err = c.GC(ctx, -time.Hour, 0)
	wantCode(t, err, codes.InvalidArgument, "older_than")

	// Without the token every call is Unauthenticated.
	anon, err := flightclient.Dial(e.addr, flightclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	_, err = anon.Held(ctx, "", flightclient.AllStages)
	wantCode(t, err, codes.Unauthenticated)
	pw, err = anon.Put(ctx, flightclient.PutCommand{Query: query, Stage: 1, Worker: "0", Partitions: 1}, arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil))
	if err == nil {
		_, err = pw.Commit()
	}
	wantCode(t, err, codes.Unauthenticated)
}
