package main

import (
	"context"
	"testing"

	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/azstore"
	"github.com/durashuffle/durashuffle/store/gcsstore"
)

// TestMetricsOnEveryStore: `serve` on MinIO, Azurite and fake-gcs-server
// takes two workers' DoPuts and serves every partition (DoGet, the memory
// tier off, so every read is a ranged GET of the store); its /metrics
// then counts the requests of each store by the store's own operation
// names and their HTTP status, as docs/metrics.md says.
func TestMetricsOnEveryStore(t *testing.T) {
	ctx := context.Background()
	const bucket = "metrics-stores"
	// What the write (a single put of each small object and its manifest)
	// and the reads send, and the status each answers with.
	want := map[string][][2]string{
		"s3":    {{"PutObject", "200"}, {"GetObject", "206"}},
		"azure": {{"PutBlob", "201"}, {"GetBlob", "206"}},
		"gcs":   {{"objects.insert", "200"}, {"objects.get", "206"}},
	}
	for _, st := range everyStore(t, bucket) {
		t.Run(st.name, func(t *testing.T) {
			tg := st.tg
			switch st.kind {
			case "azure":
				az := testenv.Azurite(t)
				s, err := azstore.New(ctx, azstore.Options{AccountName: az.Account, AccountKey: az.Key, Endpoint: az.URL, Container: bucket})
				if err != nil {
					t.Fatal(err)
				}
				ensure(t, s)
			case "gcs":
				s, err := gcsstore.New(ctx, gcsstore.Options{Endpoint: testenv.FakeGCS(t), Bucket: bucket})
				if err != nil {
					t.Fatal(err)
				}
				ensure(t, s)
			default:
				tg = newTarget(t, backends[1]) // MinIO's test bucket, made for the test
			}
			s := startFast(t, tg, "0", "-", "")
			const q, partitions = "mq", 4
			rows := writeStage(t, ctx, s, q, partitions, 5000)
			got, err := s.getAll(ctx, q, partitions, nil)
			if err != nil {
				t.Fatalf("DoGet: %v\n%s", err, s.stderr.String())
			}
			sameRows(t, got, rows)
			for _, oc := range want[st.kind] {
				if n := s.metric(metrics.RequestsTotal, "op="+oc[0], "code="+oc[1]); n == 0 {
					t.Errorf("%s{op=%q,code=%q} is 0 after a DoPut and a DoGet", metrics.RequestsTotal, oc[0], oc[1])
				}
			}
		})
	}
}

// ensure makes st's bucket or container.
func ensure(t *testing.T, st store.Store) {
	t.Helper()
	if err := st.(store.BucketMaker).EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
}
