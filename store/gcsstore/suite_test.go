package gcsstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/testkit/storesuite"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/gcsstore"
)

// TestSuite runs durashuffle's end-to-end, hostile and fault suite on
// fake-gcs-server, directly and through a fault proxy answering in the
// JSON API's words (429 rateLimitExceeded, 503 backendError).
func TestSuite(t *testing.T) {
	url := testenv.FakeGCS(t)
	storesuite.Run(t, storesuite.Target{
		Name:     "gcs",
		Ops:      storesuite.Ops{Put: "objects.insert", Part: "objects.insert", Get: "objects.get"},
		Upstream: url,
		Open: func(t *testing.T, endpoint, bucket string, c *store.Counter, stall time.Duration) store.Store {
			st, err := gcsstore.New(context.Background(), gcsstore.Options{Bucket: bucket, Endpoint: endpoint, Counter: c, FirstByteTimeout: stall})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	})
}
