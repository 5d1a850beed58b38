package e2e_test

import (
	"context"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/store"
)

// TestReadPartitionsNilIsEvery: ReadPartitions with nil or an empty list
// reads every partition, in partition order, as the sidecar's ticket with
// no partition does.
func TestReadPartitionsNilIsEvery(t *testing.T) {
	ctx := context.Background()
	c, err := durashuffle.Open(ctx, testConfig(), durashuffle.WithStore(&store.Mem{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "all", Worker: "0", Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	writeIDs(t, w, 0, 1200, 3) // 200 rows a batch, round-robin
	if _, err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenStage(ctx, "all", 0)
	if err != nil {
		t.Fatal(err)
	}
	read := func(ps []int) (partitions []int, rows int64) {
		recs, err := s.ReadPartitions(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		defer recs.Release()
		for recs.Next() {
			if n := len(partitions); n == 0 || partitions[n-1] != recs.Partition() {
				partitions = append(partitions, recs.Partition())
			}
			rows += recs.RecordBatch().NumRows()
		}
		if err := recs.Err(); err != nil {
			t.Fatal(err)
		}
		return partitions, rows
	}
	for _, ps := range [][]int{nil, {}} {
		got, rows := read(ps)
		if len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 2 || rows != 1200 {
			t.Errorf("ReadPartitions(%#v): partitions %v, %d rows; want 0, 1, 2 and 1200 rows", ps, got, rows)
		}
	}
}
