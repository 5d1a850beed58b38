package e2e_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// corpusPartitions is how many partitions a corpus case is written to:
// batch k goes to partition k%corpusPartitions, so that a partition holds
// batches of several dictionaries, and one partition stays empty.
const corpusPartitions = 4

// TestCorpusRoundTrips writes every case of the type corpus
// (internal/testkit/arrowcorpus: every Arrow type, nested, dictionary,
// run-end encoded, extension, sliced and zero-row batches) with
// Writer.Write, commits and seals it, and reads it back in partition
// order (ReadPartitions, partition by partition and all at once) and in
// storage order (ReadStored): the schema with its metadata and every
// value and null come back as written, in order.
func TestCorpusRoundTrips(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		cases := arrowcorpus.Cases(mem)
		defer mem.AssertSize(t, 0)
		defer arrowcorpus.Release(cases)
		for _, cs := range cases {
			t.Run(cs.Name, func(t *testing.T) {
				corpusRoundTrip(ctx, t, c, cs)
			})
		}
	})
}

func corpusRoundTrip(ctx context.Context, t *testing.T, c *durashuffle.Client, cs arrowcorpus.Case) {
	query := "corpus-" + cs.Name
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: corpusPartitions, Schema: cs.Schema})
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]arrow.RecordBatch, corpusPartitions)
	var all []arrow.RecordBatch
	for k, b := range cs.Batches {
		p := k % (corpusPartitions - 1)
		if err := w.Write(p, b); err != nil {
			w.Abort()
			t.Fatalf("batch %d: %v", k, err)
		}
		want[p] = append(want[p], b)
	}
	for _, ws := range want {
		all = append(all, ws...)
	}
	m, err := w.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Totals.Rows != cs.Rows() {
		t.Fatalf("manifest: %d rows, %d written", m.Totals.Rows, cs.Rows())
	}
	if _, err := c.Seal(ctx, query, 0, 1); err != nil {
		t.Fatal(err)
	}
	stage, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := arrowcorpus.DiffSchema(cs.Schema, stage.Schema()); err != nil {
		t.Errorf("stage schema: %v", err)
	}
	for p := range corpusPartitions {
		sc, got := readCorpus(ctx, t, stage, []int{p}, false)
		if err := arrowcorpus.Diff(cs.Schema, want[p], sc, got[p]); err != nil {
			t.Errorf("partition %d in partition order: %v", p, err)
		}
		releaseByPartition(got)
	}
	sc, got := readCorpus(ctx, t, stage, nil, false)
	var flat []arrow.RecordBatch
	for p := range corpusPartitions {
		flat = append(flat, got[p]...)
	}
	if err := arrowcorpus.Diff(cs.Schema, all, sc, flat); err != nil {
		t.Errorf("every partition in partition order: %v", err)
	}
	releaseByPartition(got)
	sc, got = readCorpus(ctx, t, stage, nil, true)
	for p := range corpusPartitions {
		if err := arrowcorpus.Diff(cs.Schema, want[p], sc, got[p]); err != nil {
			t.Errorf("partition %d in storage order: %v", p, err)
		}
	}
	releaseByPartition(got)
}

// readAll reads partitions (nil: all) in partition or storage order and
// returns the records by partition.
func readCorpus(ctx context.Context, t *testing.T, stage *reader.Stage, partitions []int, stored bool) (*arrow.Schema, map[int][]arrow.RecordBatch) {
	t.Helper()
	read := stage.ReadPartitions
	if stored {
		read = stage.ReadStored
	}
	rr, err := read(ctx, partitions)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	got := map[int][]arrow.RecordBatch{}
	for rr.Next() {
		b := rr.RecordBatch()
		b.Retain()
		got[rr.Partition()] = append(got[rr.Partition()], b)
	}
	if err := rr.Err(); err != nil {
		t.Fatal(fmt.Errorf("read (storage order %v): %w", stored, err))
	}
	return rr.Schema(), got
}

func releaseByPartition(m map[int][]arrow.RecordBatch) {
	for _, bs := range m {
		for _, b := range bs {
			b.Release()
		}
	}
}
