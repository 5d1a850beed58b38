package azstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/durashuffle/durashuffle/internal/stall"
	"github.com/durashuffle/durashuffle/store"
)

// Defaults of the Options that bound connections and requests.
const (
	DefaultMaxConns         = 64
	DefaultConnectTimeout   = 5 * time.Second
	DefaultFirstByteTimeout = 20 * time.Second
)

// deleteBatch is Azure's limit on sub-requests per Blob Batch request.
const deleteBatch = 256

// Options configure a Store. Credentials are, in order: ConnectionString;
// AccountName with AccountKey (Shared Key); Credential; else Azure's
// default credential chain (environment, workload identity, managed
// identity, the Azure CLI).
type Options struct {
	// Container holds every blob the store writes.
	Container string
	// ConnectionString is an Azure Storage connection string
	// (AccountName, AccountKey, BlobEndpoint, ...); it names the endpoint
	// itself, so Endpoint must be empty with it.
	ConnectionString string
	// AccountName is the storage account; it names the endpoint
	// https://<account>.blob.core.windows.net/ when Endpoint is empty.
	AccountName string
	// AccountKey, with AccountName, signs requests with Shared Key.
	AccountKey string
	// Credential, if set (and no key is), signs requests with Microsoft
	// Entra ID tokens instead of the default credential chain's.
	Credential azcore.TokenCredential
	// Endpoint overrides the account's blob service URL, e.g.
	// http://127.0.0.1:10000/devstoreaccount1 for Azurite.
	Endpoint string
	// Counter, if set, records every HTTP request sent, by Azure's
	// operation name (PutBlob, PutBlock, PutBlockList, GetBlob, ...) and
	// status.
	Counter *store.Counter
	// MaxConns bounds connections to the endpoint (default 64); it should
	// be at least the number of parts and ranged GETs in flight.
	MaxConns int
	// ConnectTimeout bounds dialling the endpoint and the TLS handshake
	// (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// FirstByteTimeout bounds the wait for a response's headers once the
	// request has been sent, and how long a request's body or a response's
	// body may make no progress (default DefaultFirstByteTimeout): a
	// stalled request fails as a retryable timeout.
	FirstByteTimeout time.Duration
	// HTTPClient replaces the client built from MaxConns and the timeouts
	// (tests use it to put a fault proxy in the path).
	HTTPClient *http.Client
}

// Store is a store.Store on one Azure Blob Storage container. Safe for
// concurrent use. It is no store.PartStreamer: Put Block needs its body's
// MD5 before the first byte is sent, so a part's bytes must be readable
// twice.
type Store struct {
	container *container.Client
	name      string
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.BucketMaker = (*Store)(nil)
)

// New builds a Store. It does not contact the service; EnsureBucket
// does.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.Container == "" {
		return nil, errors.New("azstore: container is required")
	}
	if o.MaxConns < 0 || o.ConnectTimeout < 0 || o.FirstByteTimeout < 0 {
		return nil, fmt.Errorf("azstore: MaxConns %d, ConnectTimeout %v and FirstByteTimeout %v must be >= 0", o.MaxConns, o.ConnectTimeout, o.FirstByteTimeout)
	}
	if o.ConnectionString != "" && o.Endpoint != "" {
		return nil, errors.New("azstore: a connection string names its endpoint: set ConnectionString or Endpoint, not both")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = newHTTPClient(o)
	}
	opts := &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: hc,
		// durashuffle retries in exactly one layer, above the store; SDK
		// retries underneath would multiply attempts and hide them from
		// the request counts.
		Retry: policy.RetryOptions{MaxRetries: -1},
		// Logging stays off: no request, header or key reaches a log.
		Logging: policy.LogOptions{},
	}}
	if o.Counter != nil {
		opts.PerRetryPolicies = []policy.Policy{countRequests{o.Counter}}
	}

	url := o.Endpoint
	if url == "" && o.AccountName != "" {
		url = "https://" + o.AccountName + ".blob.core.windows.net/"
	}
	var client *azblob.Client
	var err error
	switch {
	case o.ConnectionString != "":
		client, err = azblob.NewClientFromConnectionString(o.ConnectionString, opts)
	case url == "":
		return nil, errors.New("azstore: no ConnectionString, AccountName or Endpoint: the store has no account to talk to")
	case o.AccountKey != "":
		if o.AccountName == "" {
			return nil, errors.New("azstore: AccountKey is set without AccountName")
		}
		var cred *azblob.SharedKeyCredential
		if cred, err = azblob.NewSharedKeyCredential(o.AccountName, o.AccountKey); err != nil {
			// The SDK's message may quote the key; ours does not.
			return nil, fmt.Errorf("azstore: account %s: the account key is not valid base64", o.AccountName)
		}
		client, err = azblob.NewClientWithSharedKeyCredential(url, cred, opts)
	default:
		cred := o.Credential
		if cred == nil {
			if cred, err = azidentity.NewDefaultAzureCredential(nil); err != nil {
				return nil, fmt.Errorf("azstore: default Azure credential: %w", err)
			}
		}
		client, err = azblob.NewClient(url, cred, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("azstore: client for container %s: %w", o.Container, err)
	}
	return &Store{container: client.ServiceClient().NewContainerClient(o.Container), name: o.Container}, nil
}

// newHTTPClient pools enough connections that concurrent parts and ranged
// GETs reuse them, and bounds the wait for a connection and for a
// response's first byte (counted once the body is sent, so a large part
// on a slow link is not cut), and a body, sent or received, that makes no
// progress.
func newHTTPClient(o Options) *http.Client {
	maxConns, connect, firstByte := o.MaxConns, o.ConnectTimeout, o.FirstByteTimeout
	if maxConns == 0 {
		maxConns = DefaultMaxConns
	}
	if connect == 0 {
		connect = DefaultConnectTimeout
	}
	if firstByte == 0 {
		firstByte = DefaultFirstByteTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = stall.Dial((&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext, firstByte, "first_byte_timeout")
	tr.TLSHandshakeTimeout = connect
	tr.ResponseHeaderTimeout = firstByte
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = maxConns, maxConns, maxConns
	return &http.Client{
		Transport:     stall.Transport(tr, firstByte, "first_byte_timeout"),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Container is the container this store reads and writes.
func (s *Store) Container() string { return s.name }

// EnsureBucket creates the container if it does not exist (it
// implements store.BucketMaker: Client.CreateBucket calls it through the
// retry layer). Idempotent and safe to race with other callers.
func (s *Store) EnsureBucket(ctx context.Context) error {
	_, err := s.container.Create(ctx, nil)
	if err == nil || bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return nil
	}
	return classify("CreateContainer", "", err)
}

func (s *Store) blob(key string) *blockblob.Client { return s.container.NewBlockBlobClient(key) }

// ifNoneMatch is the condition of a create: no committed blob at the key.
var ifNoneMatch = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: new(azcore.ETagAny)}}

// Put implements store.Writer with one Put Blob. Azure keeps no CRC32C: a
// given opts.CRC32C is checked against body here, and the body's MD5 goes
// with it (Content-MD5), which the service checks against the bytes that
// arrived, so the bytes checksummed are the bytes stored.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts store.PutOptions) error {
	if opts.CRC32C != nil {
		if got := store.CRC32C(body); got != *opts.CRC32C {
			return &store.Error{Op: "PutBlob", Key: key, Err: fmt.Errorf("%w: %d bytes have CRC32C %08x, not the %08x given", store.ErrBodyChanged, len(body), got, *opts.CRC32C)}
		}
	}
	ct := opts.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	sum := md5.Sum(body)
	in := &blockblob.UploadOptions{
		HTTPHeaders:             &blob.HTTPHeaders{BlobContentType: &ct},
		TransactionalValidation: blob.TransferValidationTypeMD5(sum[:]),
	}
	if opts.IfNoneMatch {
		in.AccessConditions = ifNoneMatch
	}
	_, err := s.blob(key).Upload(ctx, streaming.NopCloser(bytes.NewReader(body)), in)
	return classify("PutBlob", key, err)
}

// GetRange implements store.Reader with one Get Blob. A zero length
// returns an empty body without a request: there is no Range header for
// zero bytes.
func (s *Store) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if off < 0 {
		return nil, &store.Error{Op: "GetBlob", Key: key, Err: fmt.Errorf("%w: negative offset %d", store.ErrInvalidRange, off)}
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	// Offset 0 and Count 0 send no Range at all: a plain GET returns an
	// empty blob's zero bytes, where "bytes=0-" would be a 416.
	r := blob.HTTPRange{Offset: off}
	if length > 0 {
		r.Count = length
	}
	resp, err := s.blob(key).DownloadStream(ctx, &blob.DownloadStreamOptions{Range: r})
	if err != nil {
		return nil, classify("GetBlob", key, err)
	}
	if off > 0 {
		if err := checkRange(key, off, resp.ContentRange); err != nil {
			resp.Body.Close()
			return nil, err
		}
	}
	var body io.Reader = resp.Body
	if length > 0 {
		body = io.LimitReader(resp.Body, length)
	}
	return stall.Classified(resp.Body, body, func(err error) error { return classify("GetBlob", key, err) }), nil
}

// checkRange checks a ranged Get Blob's Content-Range ("bytes
// first-last/size") starts at off. A server (or proxy) that ignores Range
// sends the whole blob, and handing that out as the range would corrupt
// every frame after. A range from the blob's end is what the service
// refuses (416 InvalidRange) and Azurite answers with an empty 206
// ("bytes 100-99/100"): the store answers as the service does.
func checkRange(key string, off int64, contentRange *string) error {
	var first, last, size int64
	if contentRange == nil {
		return &store.Error{Op: "GetBlob", Key: key, Err: fmt.Errorf("server ignored the range from byte %d", off)}
	}
	if _, err := fmt.Sscanf(*contentRange, "bytes %d-%d/%d", &first, &last, &size); err != nil || first != off {
		return &store.Error{Op: "GetBlob", Key: key, Err: fmt.Errorf("asked for bytes from %d, got Content-Range %q", off, *contentRange)}
	}
	if off >= size {
		return &store.Error{Op: "GetBlob", Key: key, Status: 416, Code: "InvalidRange",
			Err: fmt.Errorf("%w: offset %d of a %d-byte blob", store.ErrInvalidRange, off, size)}
	}
	return nil
}

// List implements store.Lister with List Blobs: flat without a delimiter,
// hierarchical with one. Blobs with only uncommitted blocks (open
// uploads) are not listed.
func (s *Store) List(ctx context.Context, prefix, delimiter string) ([]store.ObjectInfo, []string, error) {
	var objects []store.ObjectInfo
	var prefixes []string
	add := func(items []*container.BlobItem) {
		for _, b := range items {
			o := store.ObjectInfo{Key: deref(b.Name)}
			if p := b.Properties; p != nil {
				o.Size, o.LastModified = deref(p.ContentLength), deref(p.LastModified)
			}
			objects = append(objects, o)
		}
	}
	if delimiter == "" {
		for p := s.container.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix}); p.More(); {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, nil, classify("ListBlobs", prefix, err)
			}
			add(page.Segment.BlobItems)
		}
		return objects, nil, nil
	}
	for p := s.container.NewListBlobsHierarchyPager(delimiter, &container.ListBlobsHierarchyOptions{Prefix: &prefix}); p.More(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, classify("ListBlobs", prefix, err)
		}
		add(page.Segment.BlobItems)
		for _, bp := range page.Segment.BlobPrefixes {
			prefixes = append(prefixes, deref(bp.Name))
		}
	}
	return objects, prefixes, nil
}

// Delete implements store.Deleter with Blob Batch requests of up to 256
// Delete Blob sub-requests each. Keys that do not exist are not errors;
// per-key failures are reported together, the first failing key as the
// error's Key.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	for len(keys) > 0 {
		batch := keys[:min(len(keys), deleteBatch)]
		keys = keys[len(batch):]
		if err := s.deleteBatch(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) deleteBatch(ctx context.Context, keys []string) error {
	bb, err := s.container.NewBatchBuilder()
	if err != nil {
		return &store.Error{Op: "BlobBatch", Key: keys[0], Err: err}
	}
	for _, k := range keys {
		if err := bb.Delete(k, nil); err != nil {
			return &store.Error{Op: "BlobBatch", Key: k, Err: err}
		}
	}
	resp, err := s.container.SubmitBatch(ctx, bb, nil)
	if err != nil {
		return classify("BlobBatch", keys[0], fmt.Errorf("delete %d keys: %w", len(keys), err))
	}
	var failed []*store.Error
	for _, r := range resp.Responses {
		if r.Error == nil || bloberror.HasCode(r.Error, bloberror.BlobNotFound) {
			continue
		}
		failed = append(failed, classify("DeleteBlob", deref(r.BlobName), r.Error).(*store.Error))
	}
	if len(failed) == 0 {
		return nil
	}
	// The batch is worth retrying only if every failure is transient.
	retry := true
	var msgs []string
	for i, e := range failed {
		retry = retry && e.Retryable
		if i < 5 {
			msgs = append(msgs, e.Error())
		}
	}
	return &store.Error{
		Op: "BlobBatch", Key: failed[0].Key, Status: failed[0].Status, Code: failed[0].Code, Retryable: retry,
		Err: fmt.Errorf("%d of %d keys not deleted: %s", len(failed), len(keys), strings.Join(msgs, "; ")),
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
