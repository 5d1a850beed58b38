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
)

// The core of a worker and of the next stage's reader, as the README
// shows it (a doc test holds the README to this text): rows written to
// partition 7, committed, sealed and read back, on the in-process S3
// server.
func Example_worker() {
	ctx := context.Background()
	srv, err := embedded.Start("", "shuffle") // in-process, on loopback; against S3 or MinIO, leave it out
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cfg := durashuffle.DefaultConfig() // or cfg.LoadFile("durashuffle.yaml"); docs/configuration.md
	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = "shuffle", srv.Endpoint(), true
	// One client per process: the upload pool is shared. The embedded
	// server takes only requests signed with its keys; elsewhere the AWS
	// chain's credentials are used.
	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(srv.Credentials()))
	if err != nil {
		log.Fatal(err) // an invalid key wraps durashuffle.ErrInvalidConfig and names it
	}
	defer c.Close()

	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.PrimitiveTypes.Int64}}, nil)
	record, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(`[{"key": 7}, {"key": 15}]`))
	if err != nil {
		log.Fatal(err)
	}
	defer record.Release()
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q1", Stage: 0, Worker: "0", Partitions: 64})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Write(7, record); err != nil { // from any number of goroutines; blocks at the memory bound
		w.Abort()
		log.Fatal(err)
	}
	if _, err := w.Commit(ctx); err != nil { // manifest last; ctx bounds every request of the commit
		log.Fatal(err) // durashuffle.IsRetryable(err): rerun the task as a new attempt
	}
	if _, err := c.Seal(ctx, "q1", 0, 1); err != nil { // once workers 0..N-1 have committed
		log.Fatal(err)
	}

	st, err := c.OpenStage(ctx, "q1", 0) // one GET
	if err != nil {
		log.Fatal(err)
	}
	rr, err := st.ReadPartitions(ctx, []int{7}) // nil: every partition; also ReadResults(ctx, offset, limit)
	if err != nil {
		log.Fatal(err)
	}
	defer rr.Release()
	for rr.Next() { // the batch is valid until the next Next
		fmt.Printf("partition %d: %d rows\n", rr.Partition(), rr.RecordBatch().NumRows())
	}
	if err := rr.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// partition 7: 2 rows
}
