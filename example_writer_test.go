package durashuffle_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
)

// Write refuses a batch it cannot store, and says why with an error the
// caller tells apart with errors.Is; the writer keeps what it took
// before, and Commit commits it.
func ExampleWriter_Write_refused() {
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

	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.PrimitiveTypes.Int64}}, nil)
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q3", Stage: 0, Worker: "0", Partitions: 4, Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	good, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(`[{"key": 1}, {"key": 2}]`))
	if err != nil {
		log.Fatal(err)
	}
	defer good.Release()
	other := arrow.NewSchema([]arrow.Field{{Name: "name", Type: arrow.BinaryTypes.String}}, nil)
	wrong, _, err := array.RecordFromJSON(memory.DefaultAllocator, other, strings.NewReader(`[{"name": "x"}]`))
	if err != nil {
		log.Fatal(err)
	}
	defer wrong.Release()
	// No columns at all: not a batch Write can store.
	empty := array.NewRecordBatch(arrow.NewSchema(nil, nil), nil, 0)
	defer empty.Release()

	fmt.Println("good batch:", w.Write(1, good))
	err = w.Write(9, good)
	fmt.Println("partition 9 of 4:", errors.Is(err, durashuffle.ErrPartition))
	err = w.Write(1, wrong)
	fmt.Println("another schema:", errors.Is(err, durashuffle.ErrSchema))
	err = w.Write(1, empty)
	fmt.Println("no columns:", errors.Is(err, durashuffle.ErrBatch), durashuffle.IsRetryable(err))
	m, err := w.Commit(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed rows:", m.Totals.Rows)
	// Output:
	// good batch: <nil>
	// partition 9 of 4: true
	// another schema: true
	// no columns: true false
	// committed rows: 2
}
