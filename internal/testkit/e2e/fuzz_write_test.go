package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"io"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/internal/ipcguard"
	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
	"github.com/durashuffle/durashuffle/internal/testkit/hostile"
	"github.com/durashuffle/durashuffle/store"
)

// FuzzWrite writes the record batches Arrow's IPC reader decodes from a
// mutated stream with Writer.Write, batch k to partition k%3, on a client
// of its own over store.Mem. Every Write either takes the batch or refuses
// it with chunker.ErrBatch, after which Abort leaves no object and no
// upload; a writer that took every batch commits, and each partition
// reads back the rows written to it, in order. Nothing may panic or
// hang: the calls that wait take a context of 8 s, inside the fuzzer's
// own 10 s an input, so that a hang fails saying which call. The seeds are
// internal/testkit/hostile's: a good stream of two batches, a zero-column schema
// with a 5-row batch, a negative first offset, list offsets past the
// child, string and list offsets that decrease, byte flips of the good
// stream, a schema of 3,000,000,000 fields and a compression bomb, and
// every case of the type corpus (internal/testkit/arrowcorpus) as a
// stream. What reads back is compared with arrowcorpus.Diff.
func FuzzWrite(f *testing.F) {
	good := hostile.Stream(hostile.Schema, hostile.Good(), hostile.Good())
	decoded := [][]byte{good}
	for _, c := range hostile.Cases() {
		decoded = append(decoded, c.Stream)
	}
	for i, s := range decoded {
		f.Add(s)
		// These seeds reach Write, not only the decoder: Arrow's reader
		// does not check offsets.
		recs := decodeStream(s)
		if len(recs) == 0 {
			f.Fatalf("seed %d does not decode: the fuzz target would not reach Write", i)
		}
		for _, r := range recs {
			r.Release()
		}
	}
	for seed := range uint64(4) {
		f.Add(hostile.Flip(good, seed, 3))
	}
	// The type corpus (internal/testkit/arrowcorpus): every Arrow type
	// and layout edge, each case as a stream that decodes to its rows.
	cases := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(cases)
	for _, c := range cases {
		s := corpusStream(f, c)
		recs := decodeStream(s)
		var rows int64
		for _, r := range recs {
			rows += r.NumRows()
			r.Release()
		}
		if rows != c.Rows() {
			f.Fatalf("corpus case %s decodes to %d rows, has %d: the fuzz target would not reach Write", c.Name, rows, c.Rows())
		}
		f.Add(s)
	}
	f.Add(good[:len(good)/2])
	f.Add(hostile.HugeFieldCount())
	f.Add(hostile.CompressionBomb())

	f.Fuzz(func(t *testing.T, stream []byte) {
		if len(stream) > 1<<20 {
			return // a single iteration stays cheap
		}
		recs := decodeStream(stream)
		defer func() {
			for _, r := range recs {
				r.Release()
			}
		}()
		if len(recs) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		writeAndReadBack(ctx, t, recs)
	})
}

// corpusStream is c as an Arrow IPC stream, delta dictionaries where one
// grows (list views and unions at offset 0: arrow-go's writer needs it).
func corpusStream(f *testing.F, c arrowcorpus.Case) []byte {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(c.Schema), ipc.WithDictionaryDeltas(true))
	for _, b := range c.Batches {
		b = arrowipc.ForIPC(b, memory.DefaultAllocator)
		err := w.Write(b)
		b.Release()
		if err != nil {
			f.Fatalf("corpus case %s: %v", c.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// writeAndReadBack is one FuzzWrite input's check, on a fresh store.
func writeAndReadBack(ctx context.Context, t *testing.T, recs []arrow.RecordBatch) {
	const partitions, query = 3, "fuzz"
	st := &store.Mem{}
	c, err := durashuffle.Open(ctx, testConfig(), durashuffle.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	for k, r := range recs {
		if err := w.Write(k%partitions, r); err != nil {
			if !errors.Is(err, chunker.ErrBatch) {
				t.Fatalf("Write of batch %d (%d rows, schema %s): %v, want nil or chunker.ErrBatch", k, r.NumRows(), r.Schema(), err)
			}
			if err := w.Abort(); err != nil {
				t.Fatalf("Abort after batch %d was refused: %v", k, err)
			}
			objs, _, err := st.List(ctx, "", "")
			ups, uerr := st.ListUploads(ctx, "")
			if err != nil || uerr != nil || len(objs) != 0 || len(ups) != 0 {
				t.Fatalf("after Abort: objects %v, uploads %v (%v, %v), want none", objs, ups, err, uerr)
			}
			return
		}
		rows += r.NumRows()
	}
	m, err := w.Commit(ctx)
	if err != nil {
		t.Fatalf("Commit of %d batches Write took: %v", len(recs), err)
	}
	if m.Totals.Rows != rows {
		t.Fatalf("the worker manifest counts %d rows, Write took %d", m.Totals.Rows, rows)
	}
	s, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		var want []arrow.RecordBatch
		for k, r := range recs {
			if k%partitions == p {
				want = append(want, r)
			}
		}
		rr, err := s.ReadPartitions(ctx, []int{p})
		if err != nil {
			t.Fatal(err)
		}
		var got []arrow.RecordBatch
		for rr.Next() {
			r := rr.RecordBatch()
			r.Retain()
			got = append(got, r)
		}
		err = rr.Err()
		if err == nil {
			// Every value and null, as arrowcorpus compares them (ValueStr
			// is not defined for every type).
			err = arrowcorpus.Diff(recs[0].Schema(), want, rr.Schema(), got)
		}
		rr.Release()
		for _, r := range got {
			r.Release()
		}
		if err != nil {
			t.Fatalf("read back partition %d of what Write took: %v", p, err)
		}
	}
}

// decodeStream decodes an IPC stream as a receiver of untrusted input
// must: each message's header checked by ipcguard before Arrow's reader
// sees it (a schema of 10^9 fields would end the process), and the
// reader's allocations bounded. It returns nil for a stream that does not
// decode whole: FuzzWrite's subject is Write, not the decoder.
func decodeStream(stream []byte) []arrow.RecordBatch {
	msgs := hostile.Messages(stream)
	for _, m := range msgs {
		if ipcguard.CheckHeader(m.Header) != nil {
			return nil
		}
	}
	r, err := ipc.NewReaderFromMessageReader(&messageList{msgs: msgs},
		ipc.WithAllocator(ipcguard.NewAllocator(memory.DefaultAllocator, 64<<20, "FuzzWrite decodes at once")))
	if err != nil {
		return nil
	}
	defer r.Release()
	var out []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		out = append(out, rec)
	}
	if r.Err() != nil {
		for _, rec := range out {
			rec.Release()
		}
		return nil
	}
	return out
}

// messageList is an ipc.MessageReader of the messages ipcguard checked.
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
