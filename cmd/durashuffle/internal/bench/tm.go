package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/store"
)

// tmClient is the SDK's transfer manager on the same link as durashuffle:
// the same HTTP client (connection count, dialling through the link), the
// same endpoint and credentials, the same part size and concurrency. Its
// own defaults stay (CRC32 checksums, standard retries), except that, like
// durashuffle, it does not send "Expect: 100-continue", which would cost
// it one extra round trip per part.
func tmClient(ctx context.Context, j *Job) (*transfermanager.Client, *store.Counter, *dataClock, *http.Transport, error) {
	s3c, counter, clock, tr, err := sdkClient(ctx, j)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tm := transfermanager.New(s3c, func(o *transfermanager.Options) {
		o.PartSizeBytes = int64(j.Config.Write.ChunkSize)
		o.Concurrency = j.Config.Write.UploadConcurrency
		o.GetObjectType = tmtypes.GetObjectRanges
	})
	return tm, counter, clock, tr, nil
}

// sdkClient is the S3 client of the SDK's transfer libraries: the job's
// HTTP client on the link, its endpoint and credentials, retry_max_attempts
// attempts per request, requests counted
// and data requests timed (by the returned counter and clock); no
// "Expect: 100-continue".
func sdkClient(ctx context.Context, j *Job) (*s3.Client, *store.Counter, *dataClock, *http.Transport, error) {
	hc, tr, err := j.httpClient()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	region := j.Config.Store.Region
	if region == "" {
		region = "us-east-1"
	}
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(region)}
	if j.Embedded {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("durashuffle", "durashuffle", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	counter, clock := &store.Counter{}, &dataClock{}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if j.Endpoint != "" {
			o.BaseEndpoint = aws.String(j.Endpoint)
		}
		o.UsePathStyle = j.Config.Store.PathStyle
		o.HTTPClient = hc
		// The SDK's own retryer, with durashuffle's budget of attempts, so
		// that under faults both sides give up alike.
		o.RetryMaxAttempts = j.Config.Store.RetryMaxAttempts
		o.ContinueHeaderThresholdBytes = -1
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Deserialize.Add(countMiddleware{counter, clock, j.live}, middleware.After)
		})
	})
	return s3c, counter, clock, tr, nil
}

// countMiddleware counts every request and times the data requests; with
// a live meter, it also counts data requests in flight and the bytes of
// uploads the service acknowledged.
type countMiddleware struct {
	c     *store.Counter
	clock *dataClock
	live  *liveMeter // nil: no progress reported
}

func (countMiddleware) ID() string { return "durashuffle.bench.Count" }

func (m countMiddleware) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	op := middleware.GetOperationName(ctx)
	data := op == "UploadPart" || op == "PutObject" || op == "GetObject"
	var started time.Time
	if data {
		started = m.clock.begin()
		if m.live != nil {
			m.live.begin()
		}
	}
	out, md, err := next.HandleDeserialize(ctx, in)
	if data {
		m.clock.end(started)
		if m.live != nil {
			m.live.end(uploadLength(op, in.Request), err)
		}
	}
	status := 0
	if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp != nil && resp.Response != nil {
		status = resp.StatusCode
	}
	m.c.Request(middleware.GetOperationName(ctx), status)
	return out, md, err
}

// uploadLength is the body length of an upload request, 0 for any other.
func uploadLength(op string, req any) int64 {
	r, ok := req.(*smithyhttp.Request)
	if !ok || (op != "UploadPart" && op != "PutObject") {
		return 0
	}
	// Over TLS the SDK sends aws-chunked bodies: their length has the
	// chunk framing and the checksum trailer on top of the part's bytes.
	if v := r.Header.Get("X-Amz-Decoded-Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	if r.ContentLength > 0 {
		return r.ContentLength
	}
	if n, ok, err := r.StreamLength(); ok && err == nil {
		return n
	}
	return 0
}

// writeTM uploads the already-encoded data objects (local files written
// by encode-files) with UploadObject, all objects at once on the one
// link.
func writeTM(ctx context.Context, j *Job) (*Result, error) {
	if len(j.Files) != len(j.Keys) || len(j.Files) == 0 {
		return nil, fmt.Errorf("transfermanager write: %d files for %d keys", len(j.Files), len(j.Keys))
	}
	tm, counter, clock, tr, err := tmClient(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	return uploadFiles(ctx, j, counter, clock, func(ctx context.Context, key string, f *os.File) error {
		_, err := tm.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String(j.Bucket), Key: aws.String(key), Body: f})
		return err
	})
}

// uploadFiles times a contender's upload of the already-encoded data
// objects (j.Files to j.Keys), all at once on the one link: the clock
// starts with the files open and stops when every upload returned.
func uploadFiles(ctx context.Context, j *Job, counter *store.Counter, clock *dataClock, upload func(ctx context.Context, key string, f *os.File) error) (*Result, error) {
	res := &Result{Name: j.Name, Objects: len(j.Files)}
	files := make([]*os.File, len(j.Files))
	for i, name := range j.Files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		res.StoredBytes += fi.Size()
		files[i] = f
	}
	if j.live != nil {
		j.live.total.Store(res.StoredBytes)
	}
	start := startClock()
	clock.start = start
	g, gctx := errgroup.WithContext(ctx)
	for i, f := range files {
		g.Go(func() error {
			if err := upload(gctx, j.Keys[i], f); err != nil {
				return fmt.Errorf("upload %s: %w", j.Keys[i], err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	res.finish(stopClock(start))
	clock.fill(res)
	res.Requests = counter.Requests()
	return res, nil
}

// readTM downloads the stage's data objects whole, with ranged GETs of
// the part size, concurrency at once, into a sink that keeps nothing.
func readTM(ctx context.Context, j *Job) (*Result, error) {
	tm, counter, clock, tr, err := tmClient(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	return downloadKeys(ctx, j, counter, clock, func(ctx context.Context, key string, w io.WriterAt) error {
		_, err := tm.DownloadObject(ctx, &transfermanager.DownloadObjectInput{
			Bucket: aws.String(j.Bucket), Key: aws.String(key), WriterAt: w,
		}, func(o *transfermanager.Options) {
			o.PartSizeBytes = int64(j.Config.Read.RangeBytes)
		})
		return err
	})
}

// downloadKeys times a contender's download of the stage's data objects
// (j.Keys) whole, all at once on the one link, into a sink that counts
// the bytes and keeps nothing: the counterpart of uploadFiles.
func downloadKeys(ctx context.Context, j *Job, counter *store.Counter, clock *dataClock, download func(ctx context.Context, key string, w io.WriterAt) error) (*Result, error) {
	res := &Result{Name: j.Name, Objects: len(j.Keys)}
	var got atomic.Int64
	start := startClock()
	clock.start = start
	g, gctx := errgroup.WithContext(ctx)
	for _, key := range j.Keys {
		g.Go(func() error {
			if err := download(gctx, key, discardAt{&got, j.live}); err != nil {
				return fmt.Errorf("download %s: %w", key, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	res.StoredBytes = got.Load()
	res.finish(stopClock(start))
	clock.fill(res)
	res.Requests = counter.Requests()
	return res, nil
}

// discardAt counts what is written, in the live meter too if there is
// one, and keeps nothing.
type discardAt struct {
	n    *atomic.Int64
	live *liveMeter
}

func (d discardAt) WriteAt(p []byte, _ int64) (int, error) {
	d.n.Add(int64(len(p)))
	if d.live != nil {
		d.live.received.Add(int64(len(p)))
	}
	return len(p), nil
}
