package durashuffle_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/partition"
)

// A map task hands the writer whole batches and lets it scatter the
// rows: by a key column (WriteKeyed, package partition's hash), or by a
// partition number per row that the task computed itself
// (WritePartitioned).
func ExampleWriter_WriteKeyed() {
	ctx := context.Background()
	srv, err := embedded.Start("", "shuffle")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = "shuffle", srv.Endpoint(), true
	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(srv.Credentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	schema := arrow.NewSchema([]arrow.Field{
		{Name: "city", Type: arrow.BinaryTypes.String},
		{Name: "sales", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	batch, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(
		`[{"city": "Lyon", "sales": 3}, {"city": "Oslo", "sales": 5}, {"city": "Lyon", "sales": 7}, {"city": "Kyiv", "sales": 1}]`))
	if err != nil {
		log.Fatal(err)
	}
	defer batch.Release()
	if err := partition.CheckKeyType(schema.Field(0).Type); err != nil { // before reading any input
		log.Fatal(err)
	}
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q4", Stage: 0, Worker: "0", Partitions: 8, Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	// Every row to the partition of its city: the same city, the same
	// partition, in every worker, however the column is encoded.
	if err := w.WriteKeyed(batch, 0); err != nil {
		w.Abort()
		log.Fatal(err)
	}
	// Or the task's own partitioning: one partition per row.
	if err := w.WritePartitioned(batch, []int32{7, 7, 0, 7}); err != nil {
		w.Abort()
		log.Fatal(err)
	}
	if _, err := w.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Seal(ctx, "q4", 0, 1); err != nil {
		log.Fatal(err)
	}

	lyon, err := partition.Assign(batch.Column(0), 8, nil) // where WriteKeyed put each row
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.OpenStage(ctx, "q4", 0)
	if err != nil {
		log.Fatal(err)
	}
	rr, err := st.ReadPartitions(ctx, []int{int(lyon[0]), 7})
	if err != nil {
		log.Fatal(err)
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		for i := range int(rec.NumRows()) {
			fmt.Printf("%s %d\n", rec.Column(0).ValueStr(i), rec.Column(1).(*array.Int64).Value(i))
		}
	}
	if err := rr.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// Lyon 3
	// Lyon 7
	// Lyon 3
	// Oslo 5
	// Kyiv 1
}
