package flightclient_test

import (
	"context"
	"fmt"
	"log"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
)

// A worker puts its output into two partitions and commits it; the stage
// of that one worker is sealed and a consumer reads partition 1 back. sidecarAddr is the
// sidecar's Flight address (durashuffle serve --listen).
func Example() {
	ctx := context.Background()
	c, err := flightclient.Dial(sidecarAddr, flightclient.Options{Token: sidecarToken})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.PrimitiveTypes.Int64}}, nil)
	batch := func(vals ...int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).AppendValues(vals, nil)
		return b.NewRecordBatch()
	}

	w, err := c.Put(ctx, flightclient.PutCommand{Query: "q42", Stage: 1, Worker: "0", Partitions: 2}, schema)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Abort() // commits nothing if Commit is not reached
	for p, rec := range []arrow.RecordBatch{batch(1, 2, 3), batch(4, 5)} {
		err := w.Write(p, rec)
		rec.Release()
		if err != nil {
			log.Fatal(err)
		}
	}
	put, err := w.Commit()
	if err != nil {
		log.Fatal(err) // status.Code(err) says why: AlreadyExists, InvalidArgument, ...
	}
	fmt.Println("committed:", put.Committed, put.Batches, "batches,", put.Rows, "rows")

	seal, err := c.Seal(ctx, "q42", 1, 1) // workers 0..0
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sealed:", seal.Sealed, seal.Rows, "rows")
	if _, err := c.Describe(ctx, "q42", 9); err != nil {
		fmt.Println("stage 9:", status.Code(err))
	}

	r, err := c.Get(ctx, flightclient.Ticket{Query: "q42", Stage: 1, Partitions: []int{1}})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Release()
	for r.Next() {
		p, _ := r.Partition()
		fmt.Println("partition", p, "keys", r.RecordBatch().Column(0))
	}
	if err := r.Err(); err != nil {
		log.Fatal(err)
	}
	// The query is read: every stage of it leaves the sidecar's memory
	// (reads would go on from the object store).
	if _, err := c.Release(ctx, "q42", flightclient.AllStages); err != nil {
		log.Fatal(err)
	}
	// Output:
	// committed: true 2 batches, 5 rows
	// sealed: true 5 rows
	// stage 9: NotFound
	// partition 1 keys [4 5]
}
