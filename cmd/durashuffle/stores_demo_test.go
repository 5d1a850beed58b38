package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/azstore"
	"github.com/durashuffle/durashuffle/store/gcsstore"
	"github.com/durashuffle/durashuffle/uploader"
)

// demoRows is the rows TestDemoOnEveryStore's demos write: small by
// default; BENCHMARKS.md's "Stores" table is the test run at the demo's
// own default, -args -demo-rows 2000000.
var demoRows = flag.Int64("demo-rows", 200_000, "TestDemoOnEveryStore: rows each demo writes")

// storeTarget is a store the CLI reaches by its flags, with the store's
// kind.
type storeTarget struct {
	name, kind string
	tg         target
}

// everyStore is MinIO, Azurite and fake-gcs-server, each as a user points
// the CLI at it; bucket names the container or bucket (the demo makes
// it).
func everyStore(t *testing.T, bucket string) []storeTarget {
	az := testenv.Azurite(t)
	gcs := testenv.FakeGCS(t)
	minio := newTarget(t, backends[1])
	minio.flags[3] = bucket // --bucket
	return []storeTarget{
		{name: "MinIO", kind: "s3", tg: minio},
		{name: "Azurite", kind: "azure", tg: target{
			flags: []string{"--store", "azure", "--azure-account", az.Account, "--endpoint", az.URL, "--bucket", bucket},
			env:   []string{envAzureKey + "=" + az.Key}}},
		{name: "fake-gcs-server", kind: "gcs", tg: target{flags: []string{"--store", "gcs", "--endpoint", gcs, "--bucket", bucket}}},
	}
}

// TestDemoOnEveryStore runs the demo (4 writers, 64 and 2,048
// partitions) on MinIO, Azurite and fake-gcs-server. Each must verify
// every partition, and its write-class requests, as the store's own
// counter names them, must be what the store's request model
// (combine.Prices, held to the counters by TestRequestModelOnEveryStore)
// makes of the objects the demo stored, as inspect reads them. By that
// model a spilled writer's 1 GiB object, in parts sized by the object
// (uploader.PlanFileParts), and its manifest are at most 12 write-class
// requests on every store; at the demo's size the per-object requests
// dominate. It logs the table of BENCHMARKS.md's "Stores" section.
func TestDemoOnEveryStore(t *testing.T) {
	cfg := durashuffle.DefaultConfig()
	up := uploader.Config{Concurrency: cfg.Write.UploadConcurrency, ChunkSize: int64(cfg.Write.ChunkSize), MaxPartSize: int64(cfg.Write.MaxPartSize)}
	var table []string
	for _, st := range everyStore(t, "demo-stores") {
		prices, err := combine.PricesOf(st.kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, partitions := range []int{64, 2048} {
			t.Run(fmt.Sprintf("%s/%d", st.name, partitions), func(t *testing.T) {
				query := fmt.Sprintf("stores-%s-%d", st.kind, partitions)
				var s demoSummary
				st.tg.run(t, nil, "demo", "--json", "--query", query, "--rows", strconv.FormatInt(*demoRows, 10), "--workers", "4",
					"--partitions", strconv.Itoa(partitions), "--hedge-factor", "0", "--log-level", "warn").must(t).decode(t, &s)
				if !s.Verified || s.PartitionsVerified != partitions || s.RowsRead != s.RowsWritten || s.RowsWritten != *demoRows {
					t.Fatalf("verified %v, %d of %d partitions, %d rows read of %d written (%d asked)",
						s.Verified, s.PartitionsVerified, partitions, s.RowsRead, s.RowsWritten, *demoRows)
				}
				var in inspectOutput
				st.tg.run(t, nil, "inspect", "--json", "--query", query, "--stage", "0").must(t).decode(t, &in)
				writes, other := prices.Classify(s.Requests)
				if in.RequestCost == nil || writes.PUT != in.RequestCost.StageWrites || writes.GET != 0 {
					t.Fatalf("the demo's write made %d %s and %d %s (%d other: %v); inspect's model of its objects says %+v",
						writes.PUT, prices.WriteClass, writes.GET, prices.ReadClass, other, s.Requests, in.RequestCost)
				}
				reads, _ := prices.Classify(s.ReadRequests)
				table = append(table, fmt.Sprintf("| %s | 4 x %d | %s | %.1f | %.1f | %.2f | %.0f | %.2f | %.2f |", st.name, partitions,
					mib(s.BytesStored), reqs.PerGiB(writes.PUT, s.BytesStored), reqs.PerGiB(reads.GET, s.BytesStored),
					s.WriteSeconds, s.WriteStored, s.ReadSeconds, s.ReadStored))
			})
		}
		const gib = 1 << 30
		parts, _, _, _, err := uploader.PlanFileParts(up, "1 GiB object", gib, 1)
		if err != nil {
			t.Fatal(err)
		}
		if n := prices.ObjectWrites(int64(parts)) + 1; n > 12 {
			t.Errorf("%s: a writer's 1 GiB object in %d parts and its manifest are %d %s, over 12 per GiB", st.name, parts, n, prices.WriteClass)
		}
	}
	t.Logf("\n| store | writers x partitions | stored | write-class / GiB | read-class / GiB | write s | write MiB/s stored | read s | read MiB/s stored |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n%s",
		joinLines(table))
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}

// TestRequestModelOnEveryStore: the write-class requests each store's
// counter records for an object stored in one put and in multipart
// uploads of 1, 3 and 40 parts are what its request model
// (combine.Prices.ObjectWrites and UploadWrites) says: on Azure a Put
// Block per part and one Put Block List, on GCS an insert per part and
// the compose calls (two levels above 32 parts), on S3 a create and a
// complete around the parts.
func TestRequestModelOnEveryStore(t *testing.T) {
	ctx := context.Background()
	az := testenv.Azurite(t)
	gcs := testenv.FakeGCS(t)
	s3ep := backends[1].get(t)
	type model struct {
		kind  string
		open  func(c *store.Counter) store.Store
		parts []int32
		size  int // of a part but the last
	}
	models := []model{
		{"s3", func(c *store.Counter) store.Store {
			s, err := s3store.New(ctx, s3ep.Options(c))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, []int32{1, 3}, store.MinPartSize},
		{"azure", func(c *store.Counter) store.Store {
			s, err := azstore.New(ctx, azstore.Options{AccountName: az.Account, AccountKey: az.Key, Endpoint: az.URL, Container: "model", Counter: c})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.EnsureBucket(ctx); err != nil {
				t.Fatal(err)
			}
			return s
		}, []int32{1, 3, 40}, 64 << 10},
		{"gcs", func(c *store.Counter) store.Store {
			s, err := gcsstore.New(ctx, gcsstore.Options{Endpoint: gcs, Bucket: "model", Counter: c})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.EnsureBucket(ctx); err != nil {
				t.Fatal(err)
			}
			return s
		}, []int32{1, 3, 40}, 64 << 10},
	}
	for _, m := range models {
		t.Run(m.kind, func(t *testing.T) {
			prices, err := combine.PricesOf(m.kind)
			if err != nil {
				t.Fatal(err)
			}
			c := &store.Counter{}
			st := m.open(c)
			// Parts of the size given (S3's least on S3), and a short last one.
			part := make([]byte, m.size)
			before := c.Requests()
			if err := st.Put(ctx, "single", []byte("one put"), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, _ := prices.Classify(reqs.Diff(c.Requests(), before)); got.PUT != prices.ObjectWrites(1) {
				t.Errorf("a single put: %d %s, the model says %d", got.PUT, prices.WriteClass, prices.ObjectWrites(1))
			}
			for _, n := range m.parts {
				key := fmt.Sprintf("multipart-%d", n)
				before := c.Requests()
				id, err := st.CreateMultipart(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				var done []store.Part
				for i := int32(1); i <= n; i++ {
					body := part
					if i == n {
						body = part[:min(1000, len(part))]
					}
					p, err := st.UploadPart(ctx, key, id, i, store.BytesBody(body).WithCRC32C(store.CRC32C(body)))
					if err != nil {
						t.Fatal(err)
					}
					done = append(done, p)
				}
				if err := st.CompleteMultipart(ctx, key, id, done); err != nil {
					t.Fatal(err)
				}
				ops := reqs.Diff(c.Requests(), before)
				if got, _ := prices.Classify(ops); got.PUT != prices.UploadWrites(int64(n)) {
					t.Errorf("%d parts: %d %s (%v), the model says %d", n, got.PUT, prices.WriteClass, ops, prices.UploadWrites(int64(n)))
				}
			}
		})
	}
}
