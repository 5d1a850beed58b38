package durashuffle_test

import (
	"context"
	"fmt"
	"log"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
)

// A stage of 3 workers x 4 partitions, written, committed, sealed and read
// back, on the in-process S3 server. Against S3 or MinIO only the
// configuration differs: cfg.Store.Bucket, and cfg.Store.Endpoint for MinIO.
func Example() {
	ctx := context.Background()
	srv, err := embedded.Start("", "shuffle") // a temporary directory, removed by Close
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
		{Name: "key", Type: arrow.PrimitiveTypes.Int64},
		{Name: "worker", Type: arrow.PrimitiveTypes.Int32},
	}, nil)
	const workers, partitions = 3, 4
	for wk := range workers {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{
			Query: "q1", Stage: 0, Worker: fmt.Sprint(wk), Partitions: partitions, Schema: schema,
		})
		if err != nil {
			log.Fatal(err)
		}
		// Each worker sends keys 0..99 to partition key % 4; Write is safe
		// from many goroutines.
		for p := range partitions {
			b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			for k := p; k < 100; k += partitions {
				b.Field(0).(*array.Int64Builder).Append(int64(k))
				b.Field(1).(*array.Int32Builder).Append(int32(wk))
			}
			rec := b.NewRecordBatch()
			b.Release()
			err := w.Write(p, rec)
			rec.Release()
			if err != nil {
				w.Abort()
				log.Fatal(err)
			}
		}
		m, err := w.Commit(ctx) // the worker manifest is the commit point
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("worker %d committed %d rows\n", wk, m.Totals.Rows)
	}

	// Once every worker committed, the stage is sealed: one index for
	// the readers of the next stage.
	sealed, err := c.Seal(ctx, "q1", 0, workers)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stage sealed: %d rows from %d workers\n", sealed.Totals.Rows, len(sealed.Workers))

	st, err := c.OpenStage(ctx, "q1", 0)
	if err != nil {
		log.Fatal(err)
	}
	rr, err := st.ReadPartitions(ctx, []int{2})
	if err != nil {
		log.Fatal(err)
	}
	defer rr.Release()
	var rows, sum int64
	for rr.Next() {
		keys := rr.RecordBatch().Column(0).(*array.Int64)
		for i := range keys.Len() {
			rows++
			sum += keys.Value(i)
		}
	}
	if err := rr.Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("partition 2: %d rows, keys summing to %d\n", rows, sum)
	// Output:
	// worker 0 committed 100 rows
	// worker 1 committed 100 rows
	// worker 2 committed 100 rows
	// stage sealed: 300 rows from 3 workers
	// partition 2: 75 rows, keys summing to 3750
}
