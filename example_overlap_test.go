package durashuffle_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/embedded"
)

// An engine that combines a stage while its writers still run: the plan
// is made from the stage's expected shape before any writer commits;
// each writer's commit result goes to the combine stage, so a group
// forms, and its tasks run, as soon as its writers have committed,
// without reading their manifests back; once every writer has committed
// the first level is sealed, then the combined level.
func Example_combineWhileWriting() {
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

	const workers, partitions = 4, 8
	cs, err := c.Combine(ctx, "q1", 0, combine.Options{
		Expected:      combine.Expect(workers, partitions, 64<<20), // about 64 MiB in all
		CommitsHanded: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	plan := cs.Plan()
	fmt.Printf("%d groups x %d buckets\n", len(plan.Groups), len(plan.Buckets))

	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.PrimitiveTypes.Int64}}, nil)
	record, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(`[{"key": 1}, {"key": 2}]`))
	if err != nil {
		log.Fatal(err)
	}
	defer record.Release()
	next := 0 // the next group to form
	for worker := range workers {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q1", Stage: 0, Worker: strconv.Itoa(worker), Partitions: partitions})
		if err != nil {
			log.Fatal(err)
		}
		for p := range partitions {
			if err := w.Write(p, record); err != nil {
				w.Abort()
				log.Fatal(err)
			}
		}
		m, err := w.Commit(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := cs.Committed(m); err != nil { // the commit's manifest: no GET to read it back
			log.Fatal(err)
		}
		// Group g is the next Groups[g].Len() workers to commit: once
		// they have, its tasks run (here, in an engine on its workers).
		if next < len(plan.Groups) && worker+1 == plan.Groups[next].Hi {
			members, err := cs.FormGroup(ctx, next, nil)
			if err != nil {
				log.Fatal(err)
			}
			for j := range plan.Buckets {
				if _, err := cs.RunTask(ctx, j*len(plan.Groups)+next); err != nil {
					log.Fatal(err)
				}
			}
			fmt.Printf("group %d (workers %s) combined\n", next, strings.Join(members, ", "))
			next++
		}
	}
	if _, err := c.Seal(ctx, "q1", 0, workers); err != nil {
		log.Fatal(err)
	}
	m, err := cs.Seal(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("combined: %d rows in %d objects\n", m.Totals.Rows, m.Totals.Objects)
	// Output:
	// 2 groups x 1 buckets
	// group 0 (workers 0, 1) combined
	// group 1 (workers 2, 3) combined
	// combined: 64 rows in 2 objects
}
