package gcsstore_test

import (
	"context"
	"log"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/store/gcsstore"
)

// A durashuffle client on a Google Cloud Storage bucket, with Google's
// application default credentials. The client puts its retry layer above
// the store; the store itself never retries.
func Example() {
	ctx := context.Background()
	st, err := gcsstore.New(ctx, gcsstore.Options{Bucket: "my-shuffle-bucket", ProjectID: "my-project"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	// Creates the bucket, with the lifecycle rule for abandoned parts,
	// if it does not exist.
	if err := st.EnsureBucket(ctx); err != nil {
		log.Fatal(err)
	}
	c, err := durashuffle.Open(ctx, durashuffle.DefaultConfig(), durashuffle.WithStore(st))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
