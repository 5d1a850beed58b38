package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
	"github.com/durashuffle/durashuffle/internal/testkit/hostile"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// FuzzPut feeds mutated Arrow IPC streams (schema messages and record
// batches) through both doors a batch comes in by: a DoPut to a real
// Flight server on loopback over the embedded S3 server (the stream's
// messages sent as they are, batch k to partition k%3), and
// durashuffle.Writer.Write of the batches Arrow's reader decodes from the
// same messages. Neither may panic or hang (each input's calls have 8 s);
// a DoPut either fails with InvalidArgument and leaves nothing (no worker
// manifest, object or open upload), or commits, and whatever commits
// reads back equal to what was written (sealed, by DoGet; the library's
// by the reader). One server, client and bucket serve every input of a
// fuzzing process; each input writes its own query.
//
// The seed corpus (run by plain go test) holds a valid stream, the
// hostile cases (a zero-column schema with a 5-row batch, offsets[0] =
// -20, list offsets past the child, decreasing offsets), byte flips of a
// body and of a schema message, a truncated stream, one of nested and
// dictionary columns, a schema claiming 3·10^9 fields and an LZ4 buffer
// claiming 1 TiB (before the header check and the decode limit, both
// ended the process out of memory), and a stream of every case of the
// type corpus (arrowcorpus: every Arrow type, dictionaries replaced and
// sent as deltas, extension types, metadata); testdata/fuzz/FuzzPut
// holds what the fuzzer found.
func FuzzPut(f *testing.F) {
	good := hostile.Stream(hostile.Schema, hostile.Good(), hostile.Good())
	f.Add(good)
	for _, c := range hostile.Cases() {
		f.Add(c.Stream)
	}
	for seed := range uint64(4) {
		f.Add(hostile.Flip(good, seed, 3))
	}
	schemaFlip := bytes.Clone(good)
	schemaFlip[40] ^= 0x5a // inside the schema message's flatbuffer
	f.Add(schemaFlip)
	f.Add(good[:len(good)/2])
	f.Add(nestedStream(f))
	f.Add(hostile.HugeFieldCount())
	f.Add(hostile.CompressionBomb())
	for _, c := range corpusStreams(f) {
		f.Add(c)
	}

	e := newEnv(f, testenv.Embedded(f), envOptions{})
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, stream []byte) {
		if len(stream) > 1<<20 {
			return // a single iteration stays cheap
		}
		ie := *e
		ie.t = t
		// Inside the fuzzer's own 10 s an input, so that a call that hangs
		// fails saying which.
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		query := fmt.Sprintf("fuzz-%d", seq.Add(1))
		ie.putAndCheck(ctx, query, stream)
		ie.writeAndCheck(ctx, query, stream)
		// Each input's output goes once checked: a bucket that grew with
		// every input would slow the listings of the later ones past the
		// fuzzer's 10 s per input.
		if _, err := ie.sc.DeleteQuery(ctx, query); err != nil {
			t.Fatalf("%s: delete-query: %v", query, err)
		}
	})
}

// writeAndCheck writes the batches Arrow's reader decodes from stream's
// messages with the library's Writer (stage 1 of query, worker 0, batch k
// to partition k%3): every Write either takes the batch or refuses it
// with durashuffle.ErrBatch (then Abort leaves nothing); a writer that took
// them all commits, and its stage reads back equal.
func (e *env) writeAndCheck(ctx context.Context, query string, stream []byte) {
	e.t.Helper()
	const partitions, stage = 3, 1
	recs, _ := decodeMessages(hostile.Messages(stream))
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	if len(recs) == 0 {
		return
	}
	w, err := e.client.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Stage: stage, Worker: "0", Partitions: partitions})
	if err != nil {
		e.t.Fatal(err)
	}
	for k, r := range recs {
		if err := w.Write(k%partitions, r); err != nil {
			if !errors.Is(err, durashuffle.ErrBatch) {
				e.t.Fatalf("%s: Write of batch %d: %v, want nil or durashuffle.ErrBatch", query, k, err)
			}
			if err := w.Abort(); err != nil {
				e.t.Fatal(err)
			}
			e.nothingLeft(query, stage, "0")
			return
		}
	}
	if _, err := w.Commit(ctx); err != nil {
		e.t.Fatalf("%s: Commit of batches Write took: %v", query, err)
	}
	s, err := e.client.OpenStage(ctx, query, stage)
	if err != nil {
		e.t.Fatal(err)
	}
	for p := range partitions {
		rr, err := s.ReadPartitions(ctx, []int{p})
		if err != nil {
			e.t.Fatal(err)
		}
		var got []string
		for rr.Next() {
			got = append(got, rowStrings(rr.RecordBatch())...)
		}
		err = rr.Err()
		rr.Release()
		if err != nil {
			e.t.Fatalf("%s: read back partition %d of what Write took: %v", query, p, err)
		}
		var want []string
		for k, r := range recs {
			if k%partitions == p {
				want = append(want, rowStrings(r)...)
			}
		}
		if !slices.Equal(got, want) {
			e.t.Fatalf("%s: partition %d read back %d rows %.300q, want %d %.300q", query, p, len(got), got, len(want), want)
		}
	}
}

// nestedStream is a stream of two batches with a struct, a dictionary
// and a large string column: seeds for the types validated by Arrow's own
// check rather than the chunker's.
func nestedStream(f *testing.F) []byte {
	dict := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32}, arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true})},
		{Name: "d", Type: dict},
		{Name: "l", Type: arrow.BinaryTypes.LargeString},
	}, nil)
	var recs []arrow.RecordBatch
	for r := range 2 {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		st := b.Field(0).(*array.StructBuilder)
		for i := range 6 {
			st.Append(true)
			st.FieldBuilder(0).(*array.Int32Builder).Append(int32(r*10 + i))
			if i%3 == 0 {
				st.FieldBuilder(1).AppendNull()
			} else {
				st.FieldBuilder(1).(*array.StringBuilder).Append(fmt.Sprint("v", i))
			}
			if err := b.Field(1).(*array.BinaryDictionaryBuilder).AppendString([]string{"x", "yy", "zzz"}[i%3]); err != nil {
				f.Fatal(err)
			}
			b.Field(2).(*array.LargeStringBuilder).Append(fmt.Sprint("large ", r, i))
		}
		recs = append(recs, b.NewRecordBatch())
		b.Release()
	}
	return hostile.Stream(sc, recs...)
}

// corpusStreams are the IPC streams of the type corpus's cases, written
// as an engine writes them (delta dictionary batches where a dictionary
// grows, sliced list views and unions with their offsets pushed to 0,
// as arrow-go's writer needs them: arrowipc.ForIPC).
func corpusStreams(f *testing.F) [][]byte {
	cases := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(cases)
	var out [][]byte
	for _, c := range cases {
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(c.Schema), ipc.WithDictionaryDeltas(true))
		for i, b := range c.Batches {
			cb := arrowipc.ForIPC(b, memory.DefaultAllocator)
			err := w.Write(cb)
			cb.Release()
			if err != nil {
				f.Fatalf("%s batch %d: %v", c.Name, i, err)
			}
		}
		if err := w.Close(); err != nil {
			f.Fatalf("%s: %v", c.Name, err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}
