// Command engine is a program outside the durashuffle module that uses
// only its exported API, the way a query engine's worker would: three
// workers write a stage of four partitions to an S3 bucket, a
// coordinator seals it, and a reader of the next stage reads one
// partition back and checks every row.
//
//	go run . -endpoint http://127.0.0.1:9000 -bucket shuffle
//
// Credentials come from the AWS chain (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, a profile, a role). It exits 1 on any failure
// or mismatch. durashuffle's make test builds and runs it against MinIO.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"golang.org/x/sync/errgroup"
)

const (
	workers    = 3
	partitions = 4
	rowsEach   = 10_000 // per worker
)

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "key", Type: arrow.PrimitiveTypes.Int64},
	{Name: "worker", Type: arrow.PrimitiveTypes.Int32},
	{Name: "payload", Type: arrow.BinaryTypes.String},
}, nil)

func main() {
	endpoint := flag.String("endpoint", "", "S3 endpoint (empty: AWS)")
	bucket := flag.String("bucket", "", "bucket, created if missing")
	query := flag.String("query", fmt.Sprintf("engine-%d", time.Now().UnixNano()), "query ID")
	read := flag.Int("partition", 1, "partition to read back")
	flag.Parse()
	if err := run(*endpoint, *bucket, *query, *read); err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		os.Exit(1)
	}
}

func run(endpoint, bucket, query string, part int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = bucket, endpoint, endpoint != ""
	c, err := durashuffle.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.CreateBucket(ctx); err != nil {
		return err
	}

	// The map stage: each worker on its own goroutine, as an engine runs
	// its tasks.
	g, gctx := errgroup.WithContext(ctx)
	for wk := range workers {
		g.Go(func() error { return writeWorker(gctx, c, query, wk) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	sealed, err := c.Seal(ctx, query, 0, workers)
	if err != nil {
		return err
	}
	fmt.Printf("sealed %s stage 0: %d rows, %d workers, %d partitions\n", query, sealed.Totals.Rows, len(sealed.Workers), sealed.Partitions)

	// The reduce stage: one task reads its partition.
	st, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		return err
	}
	rr, err := st.ReadPartitions(ctx, []int{part})
	if err != nil {
		return err
	}
	defer rr.Release()
	seen := map[[2]int64]bool{}
	for rr.Next() {
		if rr.Partition() != part {
			return fmt.Errorf("a batch of partition %d in a read of partition %d", rr.Partition(), part)
		}
		rec := rr.RecordBatch()
		keys := rec.Column(0).(*array.Int64)
		wks := rec.Column(1).(*array.Int32)
		pay := rec.Column(2).(*array.String)
		for i := range int(rec.NumRows()) {
			k, w := keys.Value(i), int64(wks.Value(i))
			if int(k%partitions) != part || pay.Value(i) != payload(int(w), k) || seen[[2]int64{w, k}] {
				return fmt.Errorf("row %d of worker %d: wrong partition, payload or a duplicate", k, w)
			}
			seen[[2]int64{w, k}] = true
		}
	}
	if err := rr.Err(); err != nil {
		return err
	}
	want := 0
	for k := range rowsEach {
		if k%partitions == part {
			want += workers
		}
	}
	if len(seen) != want {
		return fmt.Errorf("partition %d: read %d rows, want %d", part, len(seen), want)
	}
	fmt.Printf("partition %d: %d rows read back, every one as written\n", part, len(seen))
	return nil
}

func writeWorker(ctx context.Context, c *durashuffle.Client, query string, wk int) error {
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Stage: 0, Worker: fmt.Sprint(wk), Partitions: partitions, Schema: schema})
	if err != nil {
		return err
	}
	for p := range partitions {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		for k := p; k < rowsEach; k += partitions {
			b.Field(0).(*array.Int64Builder).Append(int64(k))
			b.Field(1).(*array.Int32Builder).Append(int32(wk))
			b.Field(2).(*array.StringBuilder).Append(payload(wk, int64(k)))
		}
		rec := b.NewRecordBatch()
		b.Release()
		err := w.Write(p, rec)
		rec.Release()
		if err != nil {
			w.Abort()
			return err
		}
	}
	_, err = w.Commit(ctx)
	return err
}

func payload(worker int, key int64) string { return fmt.Sprintf("w%d-k%d", worker, key) }
