package bench

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The manager contender is github.com/aws/aws-sdk-go-v2/feature/s3/manager,
// deprecated in favour of transfermanager but what most Go code in
// production uploads and downloads with: its Uploader and Downloader with
// the same part size and concurrency on the same S3 client as
// transfermanager (the same link, HTTP client and endpoint), its own
// defaults otherwise (checksums as the client's defaults, no retries
// beyond the SDK's).

// writeManager uploads the already-encoded data objects (local files
// written by encode-files) with manager.Uploader, all objects at once.
func writeManager(ctx context.Context, j *Job) (*Result, error) {
	if len(j.Files) != len(j.Keys) || len(j.Files) == 0 {
		return nil, fmt.Errorf("manager write: %d files for %d keys", len(j.Files), len(j.Keys))
	}
	s3c, counter, clock, tr, err := sdkClient(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	up := manager.NewUploader(s3c, func(u *manager.Uploader) {
		u.PartSize = int64(j.Config.Write.ChunkSize)
		u.Concurrency = j.Config.Write.UploadConcurrency
	})
	return uploadFiles(ctx, j, counter, clock, func(ctx context.Context, key string, f *os.File) error {
		_, err := up.Upload(ctx, &s3.PutObjectInput{Bucket: aws.String(j.Bucket), Key: aws.String(key), Body: f})
		return err
	})
}

// readManager downloads the stage's data objects whole with
// manager.Downloader (ranged GETs of read_range_bytes, concurrency at
// once) into a sink that keeps nothing.
func readManager(ctx context.Context, j *Job) (*Result, error) {
	s3c, counter, clock, tr, err := sdkClient(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	down := manager.NewDownloader(s3c, func(d *manager.Downloader) {
		d.PartSize = int64(j.Config.Read.RangeBytes)
		d.Concurrency = j.Config.Write.UploadConcurrency
	})
	return downloadKeys(ctx, j, counter, clock, func(ctx context.Context, key string, w io.WriterAt) error {
		_, err := down.Download(ctx, w, &s3.GetObjectInput{Bucket: aws.String(j.Bucket), Key: aws.String(key)})
		return err
	})
}
