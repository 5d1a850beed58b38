package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/option"
	htransport "google.golang.org/api/transport/http"

	"github.com/durashuffle/durashuffle/internal/opname"
	"github.com/durashuffle/durashuffle/store"
)

// The cloud stores' baselines: each SDK's own transfer helpers, on the
// same link, HTTP client, endpoint and credentials as durashuffle, with
// the same part size and concurrency where the helper takes them, and
// their own defaults otherwise (the SDKs' own retries included).
const (
	// AzBlob is azblob's blockblob.Client.UploadStream (BlockSize
	// chunk_size, Concurrency upload_concurrency: Put Blocks and one Put
	// Block List) and blob.Client.DownloadBuffer (ranged GETs of
	// read_range_bytes, upload_concurrency at once).
	AzBlob = "azblob"
	// GCSClient is cloud.google.com/go/storage's Writer (a resumable
	// upload in ChunkSize = chunk_size requests, one after another: the
	// Writer sends no two chunks of an object at once) and
	// ObjectHandle.NewRangeReader (ranges of read_range_bytes,
	// upload_concurrency at once).
	GCSClient = "gcs-client"
)

// sdkTransport counts an SDK helper's requests by the names the store of
// the same service records them under (azstore's and gcsstore's
// Options.Counter), and times its data requests, as countMiddleware does
// for the S3 SDK.
type sdkTransport struct {
	next  http.RoundTripper
	op    func(*http.Request) string
	c     *store.Counter
	clock *dataClock
	live  *liveMeter // nil: no progress reported
}

// sdkDataOps are the requests that carry an object's bytes.
var sdkDataOps = map[string]bool{"PutBlob": true, "PutBlock": true, "GetBlob": true,
	"objects.insert": true, "objects.insert.chunk": true, "objects.get": true}

func (t sdkTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := t.op(req)
	data := sdkDataOps[op]
	var started time.Time
	if data {
		started = t.clock.begin()
		if t.live != nil {
			t.live.begin()
		}
	}
	resp, err := t.next.RoundTrip(req)
	if data {
		t.clock.end(started)
		if t.live != nil {
			sent := int64(0)
			if req.Method == http.MethodPut || req.Method == http.MethodPost {
				sent = max(0, req.ContentLength)
			}
			t.live.end(sent, err)
		}
	}
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	t.c.Request(op, status)
	return resp, err
}

// gcsOp names the JSON API requests the storage client's Writer and
// range readers send as gcsstore names them. A resumable upload is
// started by its objects.insert; the requests carrying its chunks are
// objects.insert.chunk.
func gcsOp(r *http.Request) string {
	p := r.URL.EscapedPath()
	switch {
	case strings.Contains(p, "/upload/storage/v1/") && r.URL.Query().Get("upload_id") != "":
		return "objects.insert.chunk"
	case strings.Contains(p, "/upload/storage/v1/"):
		return "objects.insert"
	case strings.Contains(p, "/o/") && r.Method == http.MethodGet:
		return "objects.get"
	}
	return "other " + r.Method
}

// sdkHTTP is the job's HTTP client on the link with the SDK's requests
// counted (by op) and timed; the transport is the caller's to close.
func sdkHTTP(j *Job, op func(*http.Request) string) (*http.Client, *store.Counter, *dataClock, *http.Transport, error) {
	hc, tr, err := j.httpClient()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	counter, clock := &store.Counter{}, &dataClock{}
	hc.Transport = sdkTransport{next: tr, op: op, c: counter, clock: clock, live: j.live}
	return hc, counter, clock, tr, nil
}

// azContainer is azblob's client of the job's container, on the link:
// Shared Key from AZURE_STORAGE_KEY, else Azure's default credentials.
func azContainer(j *Job) (*container.Client, *store.Counter, *dataClock, *http.Transport, error) {
	hc, counter, clock, tr, err := sdkHTTP(j, opname.Azure)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	url, err := serviceURL(j.Config)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	opts := &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: hc}}
	var c *azblob.Client
	if key := os.Getenv(EnvAzureKey); key != "" {
		cred, kerr := azblob.NewSharedKeyCredential(j.Config.Store.AzureAccount, key)
		if kerr != nil {
			return nil, nil, nil, nil, fmt.Errorf("azure shared key: %w", kerr)
		}
		c, err = azblob.NewClientWithSharedKeyCredential(url, cred, opts)
	} else {
		cred, cerr := azidentity.NewDefaultAzureCredential(nil)
		if cerr != nil {
			return nil, nil, nil, nil, fmt.Errorf("azure credentials: %w", cerr)
		}
		c, err = azblob.NewClient(url, cred, opts)
	}
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return c.ServiceClient().NewContainerClient(j.Bucket), counter, clock, tr, nil
}

// writeAzBlob uploads the already-encoded data objects with
// UploadStream, all objects at once on the one link.
func writeAzBlob(ctx context.Context, j *Job) (*Result, error) {
	cc, counter, clock, tr, err := azContainer(j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	return uploadFiles(ctx, j, counter, clock, func(ctx context.Context, key string, f *os.File) error {
		_, err := cc.NewBlockBlobClient(key).UploadStream(ctx, f, &blockblob.UploadStreamOptions{
			BlockSize: int64(j.Config.Write.ChunkSize), Concurrency: j.Config.Write.UploadConcurrency})
		return err
	})
}

// readAzBlob downloads the stage's data objects whole with
// DownloadBuffer, into a buffer of the blob's size (DownloadBuffer
// writes nowhere else), which a GetBlobProperties request sizes.
func readAzBlob(ctx context.Context, j *Job) (*Result, error) {
	cc, counter, clock, tr, err := azContainer(j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	return downloadKeys(ctx, j, counter, clock, func(ctx context.Context, key string, w io.WriterAt) error {
		bc := cc.NewBlobClient(key)
		props, err := bc.GetProperties(ctx, nil)
		if err != nil {
			return err
		}
		if props.ContentLength == nil {
			return fmt.Errorf("blob %s: no Content-Length", key)
		}
		buf := make([]byte, *props.ContentLength)
		n, err := bc.DownloadBuffer(ctx, buf, &blob.DownloadBufferOptions{
			BlockSize: int64(j.Config.Read.RangeBytes), Concurrency: uint16(j.Config.Write.UploadConcurrency)})
		if err != nil {
			return err
		}
		_, err = w.WriteAt(buf[:n], 0)
		return err
	})
}

// gcsBucket is the storage client's handle of the job's bucket, on the
// link: unauthenticated on an emulator's endpoint, else with Google's
// application default credentials.
func gcsBucket(ctx context.Context, j *Job) (*storage.BucketHandle, *store.Counter, *dataClock, *http.Transport, error) {
	hc, counter, clock, tr, err := sdkHTTP(j, gcsOp)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	opts := []option.ClientOption{storage.WithJSONReads()}
	if ep := j.Config.Store.Endpoint; ep != "" {
		opts = append(opts, option.WithHTTPClient(hc), option.WithEndpoint(strings.TrimSuffix(ep, "/")+"/storage/v1/"))
	} else {
		authed, err := htransport.NewTransport(ctx, hc.Transport, option.WithScopes(storage.ScopeReadWrite))
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("gcs credentials: %w", err)
		}
		opts = append(opts, option.WithHTTPClient(&http.Client{Transport: authed}))
	}
	c, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return c.Bucket(j.Bucket), counter, clock, tr, nil
}

// writeGCSClient uploads the already-encoded data objects with a Writer
// each, all objects at once on the one link.
func writeGCSClient(ctx context.Context, j *Job) (*Result, error) {
	bkt, counter, clock, tr, err := gcsBucket(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	return uploadFiles(ctx, j, counter, clock, func(ctx context.Context, key string, f *os.File) error {
		w := bkt.Object(key).NewWriter(ctx)
		w.ChunkSize = int(j.Config.Write.ChunkSize)
		if _, err := io.Copy(w, f); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	})
}

// readGCSClient downloads the stage's data objects whole with range
// readers of read_range_bytes, upload_concurrency of an object's at once
// (the first range finds the object's size).
func readGCSClient(ctx context.Context, j *Job) (*Result, error) {
	bkt, counter, clock, tr, err := gcsBucket(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	step := int64(j.Config.Read.RangeBytes)
	return downloadKeys(ctx, j, counter, clock, func(ctx context.Context, key string, w io.WriterAt) error {
		obj := bkt.Object(key)
		get := func(ctx context.Context, off int64) (int64, error) {
			r, err := obj.NewRangeReader(ctx, off, step)
			if err != nil {
				return 0, err
			}
			defer r.Close()
			_, err = io.Copy(io.NewOffsetWriter(w, off), r)
			return r.Attrs.Size, err
		}
		size, err := get(ctx, 0)
		if err != nil {
			return err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(max(1, j.Config.Write.UploadConcurrency))
		for off := step; off < size; off += step {
			g.Go(func() error {
				_, err := get(gctx, off)
				return err
			})
		}
		return g.Wait()
	})
}
