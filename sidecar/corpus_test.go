package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// corpusParts is the partition count of a corpus stage: batch i goes to
// partition i % corpusParts, so a DoGet of the stage returns partition
// 0's batches, then partition 1's, each in write order.
const corpusParts = 2

// corpusSenders are the two ways a worker sends a case: the project's
// typed client (flightclient.PutWriter) and a raw Flight writer as an
// engine sends, with delta dictionary batches where a dictionary grows
// (ipc.WithDictionaryDeltas) and replacements where it changes.
var corpusSenders = []struct {
	name string
	put  func(ctx context.Context, e *env, cmd flightclient.PutCommand, c arrowcorpus.Case) (flightclient.PutResult, error)
}{
	{"flightclient", func(ctx context.Context, e *env, cmd flightclient.PutCommand, c arrowcorpus.Case) (flightclient.PutResult, error) {
		w, err := e.sc.Put(ctx, cmd, c.Schema)
		if err != nil {
			return flightclient.PutResult{}, err
		}
		defer w.Abort()
		for i, b := range c.Batches {
			if err := w.Write(i%corpusParts, b); err != nil {
				return flightclient.PutResult{}, err
			}
		}
		res, err := w.Commit()
		if err != nil {
			return flightclient.PutResult{}, err
		}
		return *res, nil
	}},
	{"raw-deltas", func(ctx context.Context, e *env, cmd flightclient.PutCommand, c arrowcorpus.Case) (flightclient.PutResult, error) {
		stream, err := e.fc.DoPut(ctx)
		if err != nil {
			return flightclient.PutResult{}, err
		}
		desc, _ := json.Marshal(cmd)
		w := flight.NewRecordWriter(stream, ipc.WithSchema(c.Schema), ipc.WithDictionaryDeltas(true))
		w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: desc})
		sendErr := func() error {
			for i, b := range c.Batches {
				// arrow-go's writer fails on sliced list views and
				// unions: an engine on arrow-go pushes their offsets to
				// 0 first, as flightclient does.
				cb := arrowipc.ForIPC(b, memory.DefaultAllocator)
				err := w.WriteWithAppMetadata(cb, partMD(i%corpusParts))
				cb.Release()
				if err != nil {
					return err
				}
			}
			if err := w.Close(); err != nil {
				return err
			}
			return w.WriteMetadata(commitMetadata(int64(len(c.Batches)), c.Rows()))
		}()
		return finishPut(stream, sendErr)
	}},
}

// TestCorpusRoundTrip: every case of the type corpus, sent by DoPut
// (typed client, and a raw writer with delta dictionaries), committed,
// sealed and read back by DoGet, has the schema it was written with
// (schema- and field-level metadata, extension types) and every value
// and null, on every backend; GetSchema and GetFlightInfo describe the
// same schema.
func TestCorpusRoundTrip(t *testing.T) {
	forEveryBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{})
		cases := arrowcorpus.Cases(memory.DefaultAllocator)
		defer arrowcorpus.Release(cases)
		for _, s := range corpusSenders {
			for _, c := range cases {
				t.Run(s.name+"/"+c.Name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					query := "corpus-" + s.name + "-" + c.Name
					res, err := s.put(ctx, e, flightclient.PutCommand{Query: query, Worker: "0", Partitions: corpusParts}, c)
					if err != nil {
						t.Fatalf("DoPut: %v", err)
					}
					if !res.Committed || res.Rows != c.Rows() || res.Batches != int64(len(c.Batches)) {
						t.Fatalf("PutResult %+v, want committed, %d batches, %d rows", res, len(c.Batches), c.Rows())
					}
					if _, err := e.sc.Seal(ctx, query, 0, 1); err != nil {
						t.Fatalf("seal: %v", err)
					}
					checkCorpusStage(ctx, t, e, query, c)
				})
			}
		}
	})
}

// checkCorpusStage reads query's stage 0 back (DoGet of the whole
// stage, of each partition, and the stage's schema from GetSchema and
// GetFlightInfo) and compares it with the case written by
// corpusSenders.
func checkCorpusStage(ctx context.Context, t *testing.T, e *env, query string, c arrowcorpus.Case) {
	t.Helper()
	var want [corpusParts][]arrow.RecordBatch
	for i, b := range c.Batches {
		want[i%corpusParts] = append(want[i%corpusParts], b)
	}
	sc, got, err := getAll(ctx, e, flightclient.Ticket{Query: query})
	if err != nil {
		t.Fatalf("DoGet of the stage: %v", err)
	}
	defer releaseAll(got)
	if err := arrowcorpus.Diff(c.Schema, append(append([]arrow.RecordBatch(nil), want[0]...), want[1]...), sc, got); err != nil {
		t.Errorf("DoGet of the stage: %v", err)
	}
	for p := range corpusParts {
		sc, got, err := getAll(ctx, e, flightclient.Ticket{Query: query, Partition: &p})
		if err != nil {
			t.Fatalf("DoGet of partition %d: %v", p, err)
		}
		if err := arrowcorpus.Diff(c.Schema, want[p], sc, got); err != nil {
			t.Errorf("DoGet of partition %d: %v", p, err)
		}
		releaseAll(got)
	}
	info, err := e.sc.Describe(ctx, query, 0)
	if err != nil {
		t.Fatalf("GetFlightInfo: %v", err)
	}
	if err := arrowcorpus.DiffSchema(c.Schema, info.Schema); err != nil {
		t.Errorf("GetFlightInfo schema: %v", err)
	}
	if info.Rows != c.Rows() {
		t.Errorf("GetFlightInfo: %d rows, want %d", info.Rows, c.Rows())
	}
	d, _ := json.Marshal(flightclient.StageRef{Query: query})
	sr, err := e.fc.GetSchema(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: d})
	if err != nil {
		t.Fatalf("GetSchema: %v", err)
	}
	gs, err := flight.DeserializeSchema(sr.GetSchema(), memory.DefaultAllocator)
	if err != nil {
		t.Fatalf("GetSchema: %v", err)
	}
	if err := arrowcorpus.DiffSchema(c.Schema, gs); err != nil {
		t.Errorf("GetSchema: %v", err)
	}
}

// getAll reads a ticket's stream whole; the batches are the caller's to
// release.
func getAll(ctx context.Context, e *env, tkt flightclient.Ticket) (*arrow.Schema, []arrow.RecordBatch, error) {
	rdr, err := e.sc.Get(ctx, tkt)
	if err != nil {
		return nil, nil, err
	}
	defer rdr.Release()
	var out []arrow.RecordBatch
	for rdr.Next() {
		b := rdr.RecordBatch()
		b.Retain()
		out = append(out, b)
	}
	if err := rdr.Err(); err != nil {
		releaseAll(out)
		return nil, nil, err
	}
	return rdr.Schema(), out, nil
}

func releaseAll(bs []arrow.RecordBatch) {
	for _, b := range bs {
		b.Release()
	}
}

// TestGetSplitsSlicedUnionsAndListViews: a frame larger than half of
// max_message_bytes goes out of DoGet in row slices; slices of a dense
// union and of list views, which arrow-go's IPC writer cannot encode,
// arrive whole and equal.
func TestGetSplitsSlicedUnionsAndListViews(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{cfg: func(c *durashuffle.Config) {
		c.Sidecar.MaxMessageBytes = durashuffle.MiB
		c.Write.FrameTargetBytes = 8 * durashuffle.MiB
		c.Write.CoalesceBudget = 32 * durashuffle.MiB
	}})
	fields := []arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "dense", Type: arrow.DenseUnionOf(fields, []arrow.UnionTypeCode{3, 7}), Nullable: true},
		{Name: "lv", Type: arrow.ListViewOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
	// Four batches of a quarter each (a message within the limit),
	// coalesced into one frame.
	const n, quarters = 40000, 4 // about 2.4 MB of strings: three or more DoGet messages
	var recs []arrow.RecordBatch
	for q := range quarters {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		u := b.Field(0).(*array.DenseUnionBuilder)
		lv := b.Field(1).(*array.ListViewBuilder)
		for i := q * n / quarters; i < (q+1)*n/quarters; i++ {
			if i%3 == 0 {
				u.Append(3)
				u.Child(0).(*array.Int64Builder).Append(int64(i))
			} else {
				u.Append(7)
				u.Child(1).(*array.StringBuilder).Append(fmt.Sprintf("value %05d of the union's string child", i))
			}
			if i%5 == 0 {
				lv.AppendNull()
				continue
			}
			lv.AppendWithSize(true, i%3)
			for j := range i % 3 {
				lv.ValueBuilder().(*array.StringBuilder).Append(fmt.Sprintf("row %d item %d", i, j))
			}
		}
		recs = append(recs, b.NewRecordBatch())
		b.Release()
	}
	defer releaseAll(recs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := e.sc.Put(ctx, flightclient.PutCommand{Query: "split", Worker: "0", Partitions: 1}, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for _, r := range recs {
		if err := w.Write(0, r); err != nil {
			t.Fatalf("DoPut: %v", err)
		}
	}
	res, err := w.Commit()
	if err != nil || res.Rows != n {
		t.Fatalf("DoPut: %+v, %v", res, err)
	}
	if res.Frames != 1 {
		t.Fatalf("%d frames, want the batches in one frame (frame_target_bytes 8 MiB)", res.Frames)
	}
	sc2, got, err := getAll(ctx, e, flightclient.Ticket{Query: "split"})
	if err != nil {
		t.Fatalf("DoGet: %v", err)
	}
	defer releaseAll(got)
	if len(got) < 3 {
		t.Fatalf("DoGet sent %d batches, want the frame cut in 3 or more (max_message_bytes 1 MiB)", len(got))
	}
	if err := arrowcorpus.Diff(sc, recs, sc2, got); err != nil {
		t.Error(err)
	}
}

// pointType is an extension type of the test's own (a struct of two
// float64), standing for an engine's type that the sidecar does not
// know.
type pointType struct {
	arrow.ExtensionBase
}

func newPointType() *pointType {
	return &pointType{ExtensionBase: arrow.ExtensionBase{Storage: arrow.StructOf(
		arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64},
		arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Float64})}}
}

func (*pointType) ArrayType() reflect.Type { return reflect.TypeOf(pointArray{}) }
func (*pointType) ExtensionName() string   { return "durashuffle.test.point" }
func (*pointType) Serialize() string       { return `{"crs":"EPSG:4326"}` }
func (p *pointType) ExtensionEquals(o arrow.ExtensionType) bool {
	return o.ExtensionName() == p.ExtensionName() && arrow.TypeEqual(p.Storage, o.StorageType())
}
func (*pointType) Deserialize(storage arrow.DataType, data string) (arrow.ExtensionType, error) {
	if data != `{"crs":"EPSG:4326"}` {
		return nil, fmt.Errorf("point metadata %q", data)
	}
	return newPointType(), nil
}

type pointArray struct{ array.ExtensionArrayBase }

// TestUnknownExtensionTypeRoundTrip: a DoPut of an extension type the
// sidecar does not know (not registered while it decodes the stream and
// stores it) keeps the type's name and metadata: a client that does not
// know it either reads the storage type with them, one that does reads
// it back as that type, with its values.
func TestUnknownExtensionTypeRoundTrip(t *testing.T) {
	ep := testenv.Embedded(t)
	e := newEnv(t, ep, envOptions{})
	pt := newPointType()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "p", Type: pt, Nullable: true, Metadata: arrow.NewMetadata([]string{"note"}, []string{"field metadata too"})},
		{Name: "k", Type: arrow.PrimitiveTypes.Int32},
	}, nil)
	storage, _, err := array.FromJSON(memory.DefaultAllocator, pt.Storage, strings.NewReader(`[{"x": 1.5, "y": -2}, null, {"x": 0, "y": 1e300}]`))
	if err != nil {
		t.Fatal(err)
	}
	p := array.NewExtensionArrayWithStorage(pt, storage)
	storage.Release()
	k, _, err := array.FromJSON(memory.DefaultAllocator, arrow.PrimitiveTypes.Int32, strings.NewReader(`[1, 2, 3]`))
	if err != nil {
		t.Fatal(err)
	}
	rec := array.NewRecordBatch(sc, []arrow.Array{p, k}, 3)
	p.Release()
	k.Release()
	defer rec.Release()
	c := arrowcorpus.Case{Name: "point", Schema: sc, Batches: []arrow.RecordBatch{rec}}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Unknown while the sidecar decodes and stores the stream (the
	// client's writer encodes the type without the registry).
	res, err := corpusSenders[0].put(ctx, e, flightclient.PutCommand{Query: "ext", Worker: "0", Partitions: corpusParts}, c)
	if err != nil || res.Rows != 3 {
		t.Fatalf("DoPut: %+v, %v", res, err)
	}
	if _, err := e.sc.Seal(ctx, "ext", 0, 1); err != nil {
		t.Fatal(err)
	}
	// Unknown to the reader too: the storage type, the extension's name
	// and metadata in the field's metadata.
	gsc, got, err := getAll(ctx, e, flightclient.Ticket{Query: "ext"})
	if err != nil {
		t.Fatalf("DoGet: %v", err)
	}
	releaseAll(got)
	f := gsc.Field(0)
	if !arrow.TypeEqual(f.Type, pt.Storage) || f.Metadata.FindKey("note") < 0 {
		t.Errorf("read back by a client that does not know the type: %s, want %s with the field's metadata", f, pt.Storage)
	}
	for key, want := range map[string]string{"ARROW:extension:name": pt.ExtensionName(), "ARROW:extension:metadata": pt.Serialize()} {
		if i := f.Metadata.FindKey(key); i < 0 || f.Metadata.Values()[i] != want {
			t.Errorf("field metadata %v: want %s = %q", f.Metadata, key, want)
		}
	}
	// Known to the reader (and to a second sidecar on the same bucket,
	// as the first's registry does not change while it runs): the
	// extension type, with its values.
	if err := arrow.RegisterExtensionType(pt); err != nil {
		t.Fatal(err)
	}
	defer arrow.UnregisterExtensionType(pt.ExtensionName())
	checkCorpusStage(ctx, t, newEnv(t, ep, envOptions{}), "ext", c)
}
