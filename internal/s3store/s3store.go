package s3store

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/durashuffle/durashuffle/internal/stall"
	"github.com/durashuffle/durashuffle/store"
)

// DefaultMaxConns is the connection pool size when Options.MaxConns is 0.
const DefaultMaxConns = 64

// deleteBatch is S3's limit on keys per DeleteObjects request.
const deleteBatch = 1000

// Options configure a Store. Credentials, region and endpoint follow the
// usual AWS chain (environment, shared config, AWS_ENDPOINT_URL, instance
// roles); the fields here override it.
type Options struct {
	Bucket string
	// Endpoint overrides the chain's endpoint, e.g. http://127.0.0.1:9000
	// for MinIO. Empty: AWS_ENDPOINT_URL(_S3) or AWS itself.
	Endpoint string
	// Region overrides the chain's region; "us-east-1" if neither has one.
	Region string
	// PathStyle addresses buckets as http://host/bucket/key, which MinIO,
	// LocalStack and the embedded server need.
	PathStyle bool
	// InsecureSkipVerify turns off TLS certificate verification. Only for
	// test servers with self-signed certificates.
	InsecureSkipVerify bool
	// CAFile names a PEM bundle of CA certificates trusted besides the
	// system's roots: a private CA that signed the endpoint's certificate.
	CAFile string
	// Counter, if set, records every HTTP request sent, by operation and
	// status.
	Counter *store.Counter
	// MaxConns bounds connections to the endpoint (default 64). Requests
	// beyond it wait for a free connection; it should be at least the
	// number of parts and ranged GETs in flight, or they queue here.
	MaxConns int
	// HTTPClient replaces the client built from MaxConns,
	// InsecureSkipVerify and the timeouts below (tests use it to put a
	// fault proxy in the path).
	HTTPClient *http.Client
	// ConnectTimeout bounds dialling the endpoint and, for https, the TLS
	// handshake, each (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// FirstByteTimeout bounds the wait for a response's first byte,
	// counted from when the request body has been sent, so a large part
	// on a slow link is not cut; and a request body the endpoint takes
	// not one byte of for this long (default DefaultFirstByteTimeout).
	FirstByteTimeout time.Duration
	// NoChecksums (config checksum none) creates multipart uploads
	// without a checksum algorithm, so that parts sent without a CRC32C
	// are accepted, and turns part streaming off.
	NoChecksums bool
	// AWS, if set, is the SDK configuration to build on instead of
	// loading the default chain (a caller's credentials, middleware,
	// HTTP client). Its retryer and checksum settings are replaced: the
	// store never retries and sends its own CRC32C.
	AWS *aws.Config
	// Credentials, if set, sign every request instead of the chain's (or
	// AWS's) credentials.
	Credentials aws.CredentialsProvider
	// AccessKeyID and SecretAccessKey, when both set, are used instead of
	// the credential chain: the embedded server and tests need fixed keys
	// without a round trip through the environment.
	AccessKeyID, SecretAccessKey string
	// SSE is the server-side encryption requested on every object written
	// (PutObject and CreateMultipartUpload; parts inherit the upload's):
	// "" leaves it to the bucket's default, "AES256" is SSE-S3, "aws:kms"
	// SSE-KMS.
	SSE string
	// SSEKMSKeyID names the KMS key for SSE "aws:kms"; empty uses the
	// account's (or server's) default key.
	SSEKMSKeyID string
}

// Store is a store.Store on one S3 bucket. Safe for concurrent use.
type Store struct {
	client *s3.Client
	tls    bool // the endpoint is https: parts can stream
	// noChecksums: checksum none. Uploads are created without an
	// algorithm and parts never stream (a streamed part's checksum is
	// its trailer).
	noChecksums bool
	bucket      string
	region      string
	sse         types.ServerSideEncryption
	kmsKey      *string
}

var _ store.Store = (*Store)(nil)

// New builds a Store. It does not contact the server; EnsureBucket does.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.Bucket == "" {
		return nil, errors.New("s3store: bucket is required")
	}
	if o.MaxConns < 0 {
		return nil, fmt.Errorf("s3store: MaxConns %d must be >= 0", o.MaxConns)
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.ConnectTimeout < 0 || o.FirstByteTimeout < 0 {
		return nil, fmt.Errorf("s3store: ConnectTimeout %v and FirstByteTimeout %v must be >= 0", o.ConnectTimeout, o.FirstByteTimeout)
	}
	t := timeouts{connect: o.ConnectTimeout, firstByte: o.FirstByteTimeout}
	if t.connect == 0 {
		t.connect = DefaultConnectTimeout
	}
	if t.firstByte == 0 {
		t.firstByte = DefaultFirstByteTimeout
	}
	// ownClient: the HTTP client is the store's own (not the caller's),
	// so the timeouts apply.
	ownClient := o.HTTPClient == nil && (o.AWS == nil || o.AWS.HTTPClient == nil)
	switch o.SSE {
	case "", string(types.ServerSideEncryptionAes256), string(types.ServerSideEncryptionAwsKms):
	default:
		return nil, fmt.Errorf("s3store: SSE %q: want empty, AES256 or aws:kms", o.SSE)
	}
	if o.SSEKMSKeyID != "" && o.SSE != string(types.ServerSideEncryptionAwsKms) {
		return nil, fmt.Errorf("s3store: SSEKMSKeyID is set but SSE is %q, not aws:kms", o.SSE)
	}
	roots, err := loadRoots(o.CAFile)
	if err != nil {
		return nil, err
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(newHTTPClient(o.MaxConns, o.InsecureSkipVerify, roots)),
		// durashuffle retries in exactly one layer, above the store; SDK
		// retries underneath would multiply attempts and hide them from
		// the request counts.
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		// Checksums are ours: we send precomputed CRC32C values. Left at
		// "when supported", the SDK would also checksum every body itself
		// and, over TLS, switch to aws-chunked bodies with a trailer,
		// which some S3-compatible servers store verbatim.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" && o.SecretAccessKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")))
	}
	if o.Credentials != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(o.Credentials))
	}
	var cfg aws.Config
	if o.AWS != nil {
		cfg = o.AWS.Copy()
		cfg.Retryer = func() aws.Retryer { return aws.NopRetryer{} }
		cfg.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		cfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		if cfg.HTTPClient == nil {
			cfg.HTTPClient = newHTTPClient(o.MaxConns, o.InsecureSkipVerify, roots)
		}
		if o.Region != "" {
			cfg.Region = o.Region
		}
		if o.Credentials != nil {
			cfg.Credentials = o.Credentials
		} else if o.AccessKeyID != "" && o.SecretAccessKey != "" {
			cfg.Credentials = credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")
		}
	} else {
		var err error
		if cfg, err = config.LoadDefaultConfig(ctx, loadOpts...); err != nil {
			return nil, fmt.Errorf("s3store: load AWS config: %w", err)
		}
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	var hc *timeoutClient
	if b, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok && ownClient {
		// The chain may have replaced the client with a copy (adding
		// AWS_CA_BUNDLE's roots); its transport carries all of it.
		hc = newTimeoutClient(b.GetTransport(), t)
	}

	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		if o.HTTPClient != nil {
			// Set here rather than in the config: the chain would try
			// to add AWS_CA_BUNDLE to it and fail on a plain client.
			so.HTTPClient = o.HTTPClient
		} else if hc != nil {
			// Here too: the client's own resolution above would wrap
			// the transport again with its default dialer.
			so.HTTPClient = hc
		}
		// "Expect: 100-continue" on every part over 2 MiB costs a round
		// trip before the body is sent, per part; it would only save bytes
		// on requests that fail anyway.
		so.ContinueHeaderThresholdBytes = -1
		so.Retryer = aws.NopRetryer{}
		// AWS_MAX_ATTEMPTS in the environment must not bring retries back.
		so.RetryMaxAttempts = 1
		if o.Counter != nil {
			so.APIOptions = append(so.APIOptions, addCounter(o.Counter))
		}
	})
	st := &Store{client: client, tls: o.Endpoint == "" || strings.HasPrefix(strings.ToLower(o.Endpoint), "https://"), bucket: o.Bucket, region: cfg.Region, sse: types.ServerSideEncryption(o.SSE), noChecksums: o.NoChecksums}
	if o.SSEKMSKeyID != "" {
		st.kmsKey = aws.String(o.SSEKMSKeyID)
	}
	return st, nil
}

// newHTTPClient pools enough connections that concurrent parts and ranged
// GETs reuse them instead of paying a TCP (and TLS) handshake each. It is
// the SDK's buildable client, not a plain one, so the chain can still add
// AWS_CA_BUNDLE's roots; New then takes its transport over and installs
// the timeouts (newTimeoutClient).
func newHTTPClient(maxConns int, insecure bool, roots *x509.CertPool) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().
		WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConns = maxConns
			t.MaxIdleConnsPerHost = maxConns
			t.MaxConnsPerHost = maxConns
			// S3 speaks HTTP/1.1; HTTP/2 to MinIO would put every part
			// on one connection and one congestion window.
			t.ForceAttemptHTTP2 = false
			if t.TLSClientConfig == nil {
				t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			t.TLSClientConfig.InsecureSkipVerify = insecure //nolint:gosec // opt-in, for test servers
			if roots != nil {
				t.TLSClientConfig.RootCAs = roots
			}
		})
}

// loadRoots returns the system's roots plus every certificate in the PEM
// file caFile, or nil (the system's roots alone) when caFile is empty.
func loadRoots(caFile string) (*x509.CertPool, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("s3store: CA file: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("s3store: CA file %s (%d bytes) holds no PEM certificate", caFile, len(pem))
	}
	return roots, nil
}

// Bucket is the bucket this store reads and writes.
func (s *Store) Bucket() string { return s.bucket }

// EnsureBucket creates the bucket if it does not exist. Idempotent and safe
// to race with other callers.
func (s *Store) EnsureBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	if err == nil {
		return nil
	}
	// HEAD responses have no body, so a missing bucket is just a 404.
	if cerr := classify("HeadBucket", "", err).(*store.Error); cerr.Status != 404 {
		return cerr
	}
	in := &s3.CreateBucketInput{Bucket: &s.bucket}
	if s.region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(s.region),
		}
	}
	if _, err = s.client.CreateBucket(ctx, in); err == nil {
		return nil
	}
	switch errCode(err) {
	case "BucketAlreadyOwnedByYou":
		return nil
	case "BucketAlreadyExists":
		// Some servers (gofakes3) answer a create race with
		// BucketAlreadyExists even for their own bucket; what matters is
		// whether we can use it now.
		if _, herr := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket}); herr == nil {
			return nil
		}
	}
	return classify("CreateBucket", "", err)
}

func errCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// Put implements store.Writer.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts store.PutOptions) error {
	ct := opts.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   &ct,
	}
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	if opts.CRC32C != nil {
		in.ChecksumCRC32C = aws.String(encodeCRC32C(*opts.CRC32C))
	}
	in.ServerSideEncryption, in.SSEKMSKeyId = s.sse, s.kmsKey
	_, err := s.client.PutObject(ctx, in)
	return classify("PutObject", key, err)
}

// CreateMultipart implements store.Writer.
func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	in := &s3.CreateMultipartUploadInput{
		Bucket:      &s.bucket,
		Key:         &key,
		ContentType: aws.String("application/octet-stream"),
		// Parts and the completed object inherit the upload's encryption.
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.kmsKey,
	}
	if !s.noChecksums {
		// AWS rejects part checksums on an upload created without an
		// algorithm ("checksum type mismatch"), and then insists that
		// Complete echoes every part's checksum; an upload created with
		// one refuses a part without it. MinIO and versitygw enforce the
		// same; gofakes3 ignores the header and keeps it as metadata.
		in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32c
	}
	out, err := s.client.CreateMultipartUpload(ctx, in)
	if err != nil {
		return "", classify("CreateMultipartUpload", key, err)
	}
	return aws.ToString(out.UploadId), nil
}

// StreamsParts implements store.PartStreamer: the SDK sends trailing
// checksums only over TLS, so only an https endpoint streams parts.
func (s *Store) StreamsParts() bool { return s.tls && !s.noChecksums }

// UploadPart implements store.Writer. A body in memory or in a file is
// sent as an io.ReadSeeker of its own, which the SDK may read more than
// once (to sign it over http) and rewinds itself; with a CRC32C it goes
// in a header, so the SDK sends the body as is (no aws-chunked encoding,
// which gofakes3 cannot decode for parts), and without one the SDK sends
// none either (it computes checksums only when required). A streamed
// body goes out as the reader yields it, aws-chunked with the CRC32C the
// SDK computes on the way in a trailer, which the server checks against
// what arrived; the part carries the CRC32C the server acknowledged,
// checked against the one of the bytes read here.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, body store.Body) (store.Part, error) {
	size := body.Size()
	pt := store.Part{Number: n, Size: size}
	in := &s3.UploadPartInput{
		Bucket:        &s.bucket,
		Key:           &key,
		UploadId:      &uploadID,
		PartNumber:    aws.Int32(n),
		ContentLength: aws.Int64(size),
	}
	if !body.Streamed() {
		in.Body = body.Reader()
		if sum, ok := body.CRC32C(); ok {
			in.ChecksumCRC32C = aws.String(encodeCRC32C(sum))
			pt.CRC32C = &sum
		}
		out, err := s.client.UploadPart(ctx, in)
		if err != nil {
			return store.Part{}, classify("UploadPart", key, fmt.Errorf("part %d (%s): %w", n, body, err))
		}
		pt.ETag = aws.ToString(out.ETag)
		return pt, nil
	}
	if !s.StreamsParts() {
		return store.Part{}, classify("UploadPart", key, fmt.Errorf("part %d (%s): streamed parts need an https endpoint with checksums on", n, body))
	}
	r := &crcReader{r: body.Reader()}
	// Not a ReadSeeker: nothing may rewind or pre-read a body whose
	// bytes do not exist yet. An algorithm and no value: the SDK
	// computes it while sending and puts it in the aws-chunked trailer.
	in.Body = struct{ io.Reader }{r}
	in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32c
	out, err := s.client.UploadPart(ctx, in)
	if err != nil {
		return store.Part{}, classify("UploadPart", key, fmt.Errorf("part %d (%s): %w", n, body, err))
	}
	if r.n != size {
		return store.Part{}, &store.Error{Op: "UploadPart", Key: key, Err: fmt.Errorf("streamed part %d: sent %d of %d bytes", n, r.n, size)}
	}
	if v := aws.ToString(out.ChecksumCRC32C); v != "" {
		got, err := decodeCRC32C(v)
		if err != nil || got != r.crc {
			return store.Part{}, &store.Error{Op: "UploadPart", Key: key, Status: 200,
				Err: fmt.Errorf("streamed part %d (%d bytes): server acknowledged CRC32C %q, sent %s", n, size, v, encodeCRC32C(r.crc))}
		}
	}
	pt.ETag, pt.CRC32C = aws.ToString(out.ETag), &r.crc
	return pt, nil
}

// crcReader counts and checksums what is read through it.
type crcReader struct {
	r   io.Reader
	n   int64
	crc uint32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.crc = store.UpdateCRC32C(c.crc, p[:n])
	return n, err
}

// decodeCRC32C reads an x-amz-checksum-crc32c value.
func decodeCRC32C(v string) (uint32, error) {
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(b) != 4 {
		return 0, fmt.Errorf("bad CRC32C %q", v)
	}
	return binary.BigEndian.Uint32(b), nil
}

// CompleteMultipart implements store.Writer.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) error {
	completed := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		completed[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag)}
		if p.CRC32C != nil {
			completed[i].ChecksumCRC32C = aws.String(encodeCRC32C(*p.CRC32C))
		}
	}
	_, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &s.bucket,
		Key:             &key,
		UploadId:        &uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
	})
	if err != nil {
		return classify("CompleteMultipartUpload", key, fmt.Errorf("%d parts: %w", len(parts), err))
	}
	return nil
}

// AbortMultipart implements store.Writer.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   &s.bucket,
		Key:      &key,
		UploadId: &uploadID,
	})
	return classify("AbortMultipartUpload", key, err)
}

// GetRange implements store.Reader. A zero length returns an empty body
// without a request: there is no valid Range header for zero bytes.
func (s *Store) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if off < 0 {
		return nil, &store.Error{Op: "GetObject", Key: key, Err: fmt.Errorf("%w: negative offset %d", store.ErrInvalidRange, off)}
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}
	switch {
	case length > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
		// off == 0, length < 0: no Range at all, because "bytes=0-" on an
		// empty object is a 416 while a plain GET returns its zero bytes.
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		return nil, classify("GetObject", key, err)
	}
	if in.Range != nil && out.ContentRange == nil && off > 0 {
		// A server (or proxy) that ignores Range sends the whole object;
		// handing that out as the range would corrupt every frame after.
		out.Body.Close()
		return nil, &store.Error{Op: "GetObject", Key: key, Err: fmt.Errorf("server ignored Range %s", *in.Range)}
	}
	var r io.Reader = out.Body
	if length > 0 {
		// Never more than asked for, even from a server that sent the
		// whole object for a range starting at 0.
		r = io.LimitReader(out.Body, length)
	}
	return stall.Classified(out.Body, r, func(err error) error { return classify("GetObject", key, err) }), nil
}

// List implements store.Lister.
func (s *Store) List(ctx context.Context, prefix, delimiter string) ([]store.ObjectInfo, []string, error) {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix}
	if delimiter != "" {
		in.Delimiter = &delimiter
	}
	var objects []store.ObjectInfo
	var prefixes []string
	for p := s3.NewListObjectsV2Paginator(s.client, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, classify("ListObjectsV2", prefix, err)
		}
		for _, o := range page.Contents {
			objects = append(objects, store.ObjectInfo{
				Key:          aws.ToString(o.Key),
				Size:         aws.ToInt64(o.Size),
				LastModified: aws.ToTime(o.LastModified),
			})
		}
		for _, cp := range page.CommonPrefixes {
			prefixes = append(prefixes, aws.ToString(cp.Prefix))
		}
	}
	return objects, prefixes, nil
}

// ListUploads implements store.Lister. It lists every upload in the bucket
// and filters by prefix here: MinIO treats a non-empty prefix as an exact
// key and silently returns nothing for a folder prefix, which would make
// abandoned uploads invisible to garbage collection. Listing uploads is a
// maintenance operation, so the extra pages are cheap.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.UploadInfo, error) {
	var uploads []store.UploadInfo
	p := s3.NewListMultipartUploadsPaginator(s.client, &s3.ListMultipartUploadsInput{Bucket: &s.bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("ListMultipartUploads", prefix, err)
		}
		for _, u := range page.Uploads {
			if key := aws.ToString(u.Key); strings.HasPrefix(key, prefix) {
				uploads = append(uploads, store.UploadInfo{
					Key:       key,
					UploadID:  aws.ToString(u.UploadId),
					Initiated: aws.ToTime(u.Initiated),
				})
			}
		}
	}
	return uploads, nil
}

// Delete implements store.Deleter, in batches of 1000 keys. Keys that do
// not exist are not errors. Per-key failures are reported together, with
// the first failing key as the error's Key.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	for len(keys) > 0 {
		batch := keys[:min(len(keys), deleteBatch)]
		keys = keys[len(batch):]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i := range batch {
			ids[i] = types.ObjectIdentifier{Key: &batch[i]}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &s.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return classify("DeleteObjects", batch[0], fmt.Errorf("%d keys: %w", len(batch), err))
		}
		if err := deleteErrors(batch, out.Errors); err != nil {
			return err
		}
	}
	return nil
}

func deleteErrors(batch []string, errs []types.Error) error {
	var failed []types.Error
	for _, e := range errs {
		if aws.ToString(e.Code) != "NoSuchKey" {
			failed = append(failed, e)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	// The batch is worth retrying only if every failure is transient.
	retry := true
	var msgs []string
	for i, e := range failed {
		retry = retry && retryableCode(aws.ToString(e.Code))
		if i < 5 {
			msgs = append(msgs, fmt.Sprintf("%s: %s %s", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message)))
		}
	}
	return &store.Error{
		Op:        "DeleteObjects",
		Key:       aws.ToString(failed[0].Key),
		Status:    200,
		Code:      aws.ToString(failed[0].Code),
		Retryable: retry,
		Err:       fmt.Errorf("%d of %d keys not deleted: %s", len(failed), len(batch), strings.Join(msgs, "; ")),
	}
}

// encodeCRC32C renders a checksum the way S3's x-amz-checksum-crc32c
// header wants it: base64 of the big-endian bytes.
func encodeCRC32C(v uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return base64.StdEncoding.EncodeToString(b[:])
}
