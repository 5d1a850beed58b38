package storesuite

import (
	"context"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// S3 is the S3 server e as a Target: its buckets made by the suite, a
// fault proxy in front speaking what e speaks (TLS with e's own
// certificate for the MinIO started here).
func S3(t *testing.T, e testenv.Endpoint) Target {
	tg := Target{
		Name:      "s3",
		Ops:       Ops{Put: "PutObject", Part: "UploadPart", Get: "GetObject"},
		Upstream:  e.URL,
		ServerTLS: e.ServerTLS(t),
		Open: func(t *testing.T, endpoint, bucket string, c *store.Counter, stall time.Duration) store.Store {
			o := e.Options(c)
			o.Endpoint, o.Bucket, o.FirstByteTimeout = endpoint, bucket, stall
			st, err := s3store.New(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
	if e.TLS() {
		tg.UpstreamTLS = e.Transport(t).TLSClientConfig
	}
	return tg
}
