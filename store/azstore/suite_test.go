package azstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/testkit/storesuite"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// TestSuite runs durashuffle's end-to-end, hostile and fault suite on
// Azurite, directly and through a fault proxy answering in Azure's words
// (503 ServerBusy, 500 OperationTimedOut).
func TestSuite(t *testing.T) {
	az := testenv.Azurite(t)
	storesuite.Run(t, storesuite.Target{
		Name:     "azure",
		Ops:      storesuite.Ops{Put: "PutBlob", Part: "PutBlock", Get: "GetBlob"},
		Upstream: strings.TrimSuffix(az.URL, "/"+az.Account),
		Path:     "/" + az.Account,
		Open: func(t *testing.T, endpoint, bucket string, c *store.Counter, stall time.Duration) store.Store {
			st, err := New(context.Background(), Options{Container: bucket, AccountName: az.Account, AccountKey: az.Key,
				Endpoint: endpoint, Counter: c, FirstByteTimeout: stall})
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	})
}
