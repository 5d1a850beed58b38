package e2e_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestOpenEncryptsEveryObject: with sse (and sse_kms_key_id) in the
// configuration, every object a writer and seal store on MinIO (data
// objects, by PutObject or multipart upload, and both manifests) is
// encrypted that way, and the stage reads back.
func TestOpenEncryptsEveryObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ep := testenv.MinIO(t) // credentials come from the environment, as for any user of Open
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion("us-east-1"), awsconfig.WithCredentialsProvider(
		credentials.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), "")))
	if err != nil {
		t.Fatal(err)
	}
	raw := s3.NewFromConfig(awsCfg, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(ep.URL), true })
	for _, tc := range []struct{ name, sse, key string }{
		{"sse-s3", "AES256", ""},
		{"sse-kms", "aws:kms", "durashuffle-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle, cfg.Store.Region = ep.Bucket, ep.URL, true, "us-east-1"
			cfg.Store.Prefix = tc.name
			cfg.Store.SSE, cfg.Store.SSEKMSKeyID = tc.sse, tc.key
			c, err := durashuffle.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, worker := range []string{"0", "1"} {
				w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: worker, Partitions: 2})
				if err != nil {
					t.Fatal(err)
				}
				n := 8000 // ~8 MiB: a multipart upload
				if worker == "1" {
					n = 100 // one PutObject
				}
				if err := writeRows(w, n, 2); err != nil {
					t.Fatal(err)
				}
				if _, err := w.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Seal(ctx, "q", 0, 2); err != nil {
				t.Fatal(err)
			}
			req := c.Counter().Requests()
			if req["CreateMultipartUpload"] == 0 || req["PutObject"] < 4 {
				t.Fatalf("requests %v: want both a multipart upload and single puts", req)
			}
			objs, _, err := c.Store().List(ctx, c.Layout().Root(), "")
			if err != nil || len(objs) != 6 {
				t.Fatalf("%d objects (want 2 data, 2 worker manifests, 1 stage index, 1 stage manifest): %v", len(objs), err)
			}
			for _, o := range objs {
				h, err := raw.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &ep.Bucket, Key: aws.String(o.Key)})
				if err != nil {
					t.Fatal(err)
				}
				if string(h.ServerSideEncryption) != tc.sse || !strings.Contains(aws.ToString(h.SSEKMSKeyId), tc.key) {
					t.Fatalf("%s stored with SSE %q key %q, want %q %q", o.Key, h.ServerSideEncryption, aws.ToString(h.SSEKMSKeyId), tc.sse, tc.key)
				}
			}
			s, err := c.OpenStage(ctx, "q", 0)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := s.ReadPartitions(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer recs.Release()
			var rows int64
			for recs.Next() {
				rows += recs.RecordBatch().NumRows()
			}
			if recs.Err() != nil || rows != 8100 {
				t.Fatalf("read %d rows, want 8100: %v", rows, recs.Err())
			}
		})
	}
}
