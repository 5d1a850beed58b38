package s3store_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// answer is what a server said to one request: "ok", "HTTP <status>
// <code>", or the error text when no response arrived.
func answer(err error) string {
	if err == nil {
		return "ok"
	}
	var api smithy.APIError
	var st interface{ HTTPStatusCode() int }
	if errors.As(err, &api) && errors.As(err, &st) {
		return fmt.Sprintf("HTTP %d %s", st.HTTPStatusCode(), api.ErrorCode())
	}
	return err.Error()
}

// TestCompatibility asks each real server, with a plain SDK client, the
// questions where MinIO and versitygw answer differently, and holds them
// to the answers in the compatibility table of docs/operations.md. The
// store hides these differences from the rest of durashuffle (the
// contract suite checks that); this test keeps the table honest when a
// pin moves. With DURASHUFFLE_TEST_ENDPOINT set, that endpoint's answers
// are logged for its column of the table (and versitygw is still checked).
func TestCompatibility(t *testing.T) {
	want := map[string]map[string]string{
		"second abort of an upload": {
			"minio": "ok", "versitygw": "HTTP 404 NoSuchUpload"},
		"uploads listed under a folder prefix": {
			"minio": "0 of 1", "versitygw": "1 of 1"},
		"lifecycle rule that aborts incomplete uploads": {
			"minio": "HTTP 400 InvalidArgument", "versitygw": "HTTP 501 NotImplemented"},
		"key under an existing object's name (a/b after a)": {
			"minio": "ok", "versitygw": "HTTP 409 ObjectParentIsFile"},
		"SSE-S3 reported by HeadObject": {
			"minio": "AES256", "versitygw": ""},
	}
	servers := []testenv.Backend{{Name: "minio", Start: testenv.MinIO}, {Name: "versitygw", Start: testenv.VersityGW}}
	if os.Getenv(testenv.EnvEndpoint) != "" {
		servers[0].Name = "endpoint"
	}
	for _, b := range servers {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Start(t)
			c := rawS3(t, e)
			ctx := ctx(t)
			bucket := aws.String(e.Bucket)
			got := map[string]string{}

			up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bucket, Key: aws.String("dir/sub/key")})
			if err != nil {
				t.Fatal(err)
			}
			abort := &s3.AbortMultipartUploadInput{Bucket: bucket, Key: aws.String("dir/sub/key"), UploadId: up.UploadId}
			ups, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: bucket, Prefix: aws.String("dir/")})
			if err != nil {
				t.Fatal(err)
			}
			got["uploads listed under a folder prefix"] = fmt.Sprintf("%d of 1", len(ups.Uploads))
			if _, err := c.AbortMultipartUpload(ctx, abort); err != nil {
				t.Fatalf("first abort: %v", err)
			}
			_, err = c.AbortMultipartUpload(ctx, abort)
			got["second abort of an upload"] = answer(err)

			_, err = c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{
				Bucket: bucket,
				LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{{
					ID:                             aws.String("durashuffle-abort-incomplete-uploads"),
					Status:                         types.ExpirationStatusEnabled,
					Filter:                         &types.LifecycleRuleFilter{Prefix: aws.String("durashuffle/")},
					AbortIncompleteMultipartUpload: &types.AbortIncompleteMultipartUpload{DaysAfterInitiation: aws.Int32(1)},
				}}},
			})
			got["lifecycle rule that aborts incomplete uploads"] = answer(err)

			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String("a")}); err != nil {
				t.Fatal(err)
			}
			_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String("a/b")})
			got["key under an existing object's name (a/b after a)"] = answer(err)

			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String("sse"),
				ServerSideEncryption: types.ServerSideEncryptionAes256}); err != nil {
				t.Fatal(err)
			}
			h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: bucket, Key: aws.String("sse")})
			if err != nil {
				t.Fatal(err)
			}
			got["SSE-S3 reported by HeadObject"] = string(h.ServerSideEncryption)

			for _, q := range slices.Sorted(maps.Keys(want)) {
				answers := want[q]
				if b.Name == "endpoint" {
					t.Logf("%s: %s", q, got[q])
				} else if got[q] != answers[b.Name] {
					t.Errorf("%s on %s: got %q, the table says %q: update the compatibility table in docs/operations.md", q, b.Name, got[q], answers[b.Name])
				} else {
					t.Logf("%s: %s", q, got[q])
				}
			}
		})
	}
}
