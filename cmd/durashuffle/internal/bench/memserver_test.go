package bench

import (
	"context"
	"testing"

	"github.com/durashuffle/durashuffle/internal/engine/s3store"
	"github.com/durashuffle/durashuffle/storetest"
)

// TestMemServerContract holds the bench's in-memory endpoint, which
// BENCHMARKS.md's numbers are measured on, to the store contract, through
// the same S3 store the client uses.
func TestMemServerContract(t *testing.T) {
	srv, err := StartMemServer("contract")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	st, err := s3store.New(context.Background(), s3store.Options{Bucket: "contract", Endpoint: srv.Endpoint(), Region: "us-east-1",
		PathStyle: true, AccessKeyID: "bench", SecretAccessKey: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, st)
}
