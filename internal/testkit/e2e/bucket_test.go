package e2e_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// TestCreateBucketRetries: Client.CreateBucket goes through the retry
// layer: with every HeadBucket and CreateBucket's first request reset,
// 500'd or SlowDown'd, it creates a bucket that did not exist, every
// request inside an attempt of the layer, and the retries counted.
func TestCreateBucketRetries(t *testing.T) {
	for _, f := range []faultproxy.Fault{faultproxy.FaultReset, faultproxy.FaultInternal, faultproxy.FaultSlowDown} {
		t.Run(string(f), func(t *testing.T) {
			ep := testenv.Embedded(t)
			p, err := faultproxy.Start(ep.URL, faultproxy.Spec{First: f, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			tr := ep.Transport(t)
			t.Cleanup(tr.CloseIdleConnections)
			audit := testenv.NewRetryAudit(tr)
			cfg := testConfig()
			cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle, cfg.Store.Region = ep.Bucket+"-new", p.URL(), true, "us-east-1"
			c, err := durashuffle.Open(context.Background(), cfg, durashuffle.WithHTTPClient(audit.Client()),
				durashuffle.WithCredentials(credentials.NewStaticCredentialsProvider(ep.AccessKeyID, ep.SecretAccessKey, "")))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.CreateBucket(context.Background()); err != nil {
				t.Fatalf("create bucket under first=%s: %v (faults %v)", f, err, p.Stats())
			}
			audit.Check(t, "CreateBucket", "HeadBucket", "CreateBucket")
			st := p.Stats()
			if st.Injected[faultproxy.Injection{Op: "HeadBucket", Fault: f}] != 1 || st.Injected[faultproxy.Injection{Op: "CreateBucket", Fault: f}] != 1 {
				t.Errorf("faults %v: want one %s on HeadBucket and one on CreateBucket", st, f)
			}
			var retried int64
			for k, n := range c.Counter().Retries() {
				if k.Op == "CreateBucket" {
					retried += n
				}
			}
			if retried < 2 {
				t.Errorf("CreateBucket retried %d times, want 2 (after the HeadBucket's fault and the CreateBucket's)", retried)
			}
			// The bucket is there: a put on it succeeds.
			if err := c.Store().Put(context.Background(), "x", []byte("x"), store.PutOptions{}); err != nil {
				t.Fatalf("put in the created bucket: %v", err)
			}
		})
	}
}

// bucketless is a store that cannot create buckets: only store.Store's
// methods of the one it embeds.
type bucketless struct{ store.Store }

// TestCreateBucketUnsupported: on a store of the caller's that cannot
// create buckets, CreateBucket says so, wrapping errors.ErrUnsupported.
func TestCreateBucketUnsupported(t *testing.T) {
	st, _ := testenv.Embedded(t).NewStore(t)
	cfg := testConfig()
	cfg.Store.Bucket = "b"
	c := testenv.Client(t, cfg, durashuffle.WithStore(bucketless{st}))
	defer c.Close()
	err := c.CreateBucket(context.Background())
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("CreateBucket on a store without EnsureBucket: %v, want errors.ErrUnsupported", err)
	}
}
