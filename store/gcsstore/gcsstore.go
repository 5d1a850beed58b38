package gcsstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/storage"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	htransport "google.golang.org/api/transport/http"

	"github.com/durashuffle/durashuffle/internal/stall"
	"github.com/durashuffle/durashuffle/store"
)

// Defaults of the Options that bound connections and requests.
const (
	DefaultMaxConns         = 64
	DefaultConnectTimeout   = 5 * time.Second
	DefaultFirstByteTimeout = 20 * time.Second
	// DefaultDeleteConcurrency is how many objects.delete requests Delete
	// keeps in flight: the JSON API deletes one object per request.
	DefaultDeleteConcurrency = 16
	// PartsLifetimeDays is the age at which the lifecycle rule of a
	// bucket EnsureBucket creates deletes part objects: far longer than
	// any upload takes.
	PartsLifetimeDays = 7
)

// Options configure a Store. Credentials are Google's application
// default credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's, the
// metadata server) unless Endpoint names an emulator.
type Options struct {
	Bucket string
	// ProjectID is the project EnsureBucket creates a missing bucket in;
	// the service needs one, an emulator does not.
	ProjectID string
	// Endpoint overrides the service, e.g. http://127.0.0.1:4443 for
	// fake-gcs-server; requests then go without authentication. Empty:
	// storage.googleapis.com with application default credentials.
	Endpoint string
	// Counter, if set, records every HTTP request sent, by JSON API
	// method (objects.insert, objects.get, objects.list, objects.delete,
	// objects.compose, buckets.get, buckets.insert) and status.
	Counter *store.Counter
	// MaxConns bounds connections to the endpoint (default 64); it should
	// be at least the parts and ranged GETs in flight, or they queue here.
	MaxConns int
	// ConnectTimeout bounds dialling the endpoint and the TLS handshake
	// (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// FirstByteTimeout bounds the wait for a response's headers once the
	// request has been sent, and how long a request's body or a response's
	// body may make no progress (default DefaultFirstByteTimeout): a
	// stalled request fails as a retryable timeout.
	FirstByteTimeout time.Duration
	// DeleteConcurrency bounds the deletes one Delete call sends at once
	// (default DefaultDeleteConcurrency).
	DeleteConcurrency int
	// HTTPTransport replaces the transport built from the options above
	// (tests put a fault server behind it). Requests are still counted,
	// and authenticated unless Endpoint is set.
	HTTPTransport http.RoundTripper
	// ClientOptions are passed to storage.NewClient after the store's own
	// (explicit credentials: option.WithCredentialsFile and the like).
	ClientOptions []option.ClientOption
}

// Store is a store.Store on one Google Cloud Storage bucket. Safe for
// concurrent use. It is no store.PartStreamer: a single-request upload
// sends an object's checksum before its bytes, so a part whose bytes are
// still being produced could not be checked by the service.
type Store struct {
	client    *storage.Client
	bucket    *storage.BucketHandle
	name      string
	projectID string
	deletes   int
}

var _ store.Store = (*Store)(nil)

// New builds a Store. It does not contact the service; EnsureBucket does.
func New(ctx context.Context, o Options) (*Store, error) {
	switch {
	case o.Bucket == "":
		return nil, errors.New("gcsstore: bucket is required")
	case o.MaxConns < 0, o.DeleteConcurrency < 0:
		return nil, fmt.Errorf("gcsstore: MaxConns %d and DeleteConcurrency %d must be >= 0", o.MaxConns, o.DeleteConcurrency)
	case o.ConnectTimeout < 0 || o.FirstByteTimeout < 0:
		return nil, fmt.Errorf("gcsstore: ConnectTimeout %v and FirstByteTimeout %v must be >= 0", o.ConnectTimeout, o.FirstByteTimeout)
	}
	if o.DeleteConcurrency == 0 {
		o.DeleteConcurrency = DefaultDeleteConcurrency
	}
	base := o.HTTPTransport
	if base == nil {
		base = newTransport(o)
	}
	var rt http.RoundTripper = readsOnce{&countingTransport{next: base, counter: o.Counter}}
	opts := []option.ClientOption{
		// Reads through the JSON API too, so that every request is one
		// of its methods, and the endpoint override covers downloads.
		storage.WithJSONReads(),
	}
	if o.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(strings.TrimSuffix(o.Endpoint, "/")+"/storage/v1/"), option.WithoutAuthentication())
	} else {
		// Application default credentials, on the store's own transport
		// (underneath the counter's view, so token fetches are not
		// counted as storage requests).
		authed, err := htransport.NewTransport(ctx, rt, append([]option.ClientOption{option.WithScopes(storage.ScopeReadWrite)}, o.ClientOptions...)...)
		if err != nil {
			return nil, fmt.Errorf("gcsstore: credentials: %w", err)
		}
		rt = authed
	}
	opts = append(opts, option.WithHTTPClient(&http.Client{Transport: rt}))
	opts = append(opts, o.ClientOptions...)
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gcsstore: client for bucket %s: %w", o.Bucket, err)
	}
	// durashuffle retries in exactly one layer, above the store; the
	// SDK's retries underneath would multiply attempts and hide them from
	// the request counts.
	client.SetRetry(storage.WithPolicy(storage.RetryNever))
	return &Store{client: client, bucket: client.Bucket(o.Bucket), name: o.Bucket, projectID: o.ProjectID, deletes: o.DeleteConcurrency}, nil
}

// Close releases the client's connections.
func (s *Store) Close() error { return s.client.Close() }

// Bucket is the bucket this store reads and writes.
func (s *Store) Bucket() string { return s.name }

// EnsureBucket creates the bucket (in Options.ProjectID) if it does not
// exist, with a lifecycle rule that deletes part objects (under
// .durashuffle-parts/) PartsLifetimeDays after their creation: the
// backstop for the parts of a writer killed before Complete or Abort,
// which gc otherwise finds (ListUploads) and aborts; and with soft
// delete off. A bucket that exists is left as it is; give it the same. Idempotent and safe to race
// with other callers.
func (s *Store) EnsureBucket(ctx context.Context) error {
	_, err := s.bucket.Attrs(ctx)
	if err == nil {
		return nil
	}
	if !errors.Is(err, storage.ErrBucketNotExist) {
		return classify("buckets.get", "", err)
	}
	project := s.projectID
	if project == "" {
		// The emulator ignores the project; the service refuses a
		// create without one, which names the field.
		project = "durashuffle"
	}
	err = s.bucket.Create(ctx, project, &storage.BucketAttrs{
		Lifecycle: storage.Lifecycle{Rules: []storage.LifecycleRule{{
			Action:    storage.LifecycleAction{Type: storage.DeleteAction},
			Condition: storage.LifecycleCondition{AgeInDays: PartsLifetimeDays, MatchesPrefix: []string{partsRoot}},
		}}},
		// No soft delete: shuffle data is deleted by design (each part
		// object on Complete, each stage by gc), and the service's
		// default would keep, and bill, every deleted byte for a week.
		SoftDeletePolicy: &storage.SoftDeletePolicy{RetentionDuration: 0},
	})
	if err == nil {
		return nil
	}
	if se := classify("buckets.insert", "", err).(*store.Error); se.Status == http.StatusConflict {
		// Created by a racing caller (or ours in another project: the
		// next request says so).
		return nil
	} else if s.projectID == "" {
		return fmt.Errorf("gcsstore: create bucket %s (no ProjectID set): %w", s.name, se)
	} else {
		return se
	}
}

// Put implements store.Writer: one objects.insert request. The body's
// CRC32C (the one given, else computed here) goes with it and the service
// refuses bytes that do not match it.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts store.PutOptions) error {
	if isReserved(key) {
		return &store.Error{Op: "objects.insert", Key: key, Err: fmt.Errorf("key is under the reserved prefix %s", partsRoot)}
	}
	sum := store.CRC32C(body)
	if opts.CRC32C != nil {
		sum = *opts.CRC32C
	}
	o := s.bucket.Object(key)
	if opts.IfNoneMatch {
		// ifGenerationMatch=0: only if no live object has the name.
		o = o.If(storage.Conditions{DoesNotExist: true})
	}
	ct := opts.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	_, err := s.write(ctx, o, ct, int64(len(body)), &sum, bytes.NewReader(body))
	return classify("objects.insert", key, err)
}

// write uploads size bytes from r as o in one request (ChunkSize 0: no
// resumable session, nothing buffered), with crc, if not nil, sent for
// the service to check. Without one the SDK computes the CRC32C of what
// it sends and compares it with the service's.
func (s *Store) write(ctx context.Context, o *storage.ObjectHandle, contentType string, size int64, crc *uint32, r io.Reader) (*storage.ObjectAttrs, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := o.NewWriter(ctx)
	w.ChunkSize = 0
	w.ContentType = contentType
	if crc != nil {
		w.CRC32C, w.SendCRC32C = *crc, true
	}
	n, err := io.Copy(w, r)
	if err != nil {
		// Cancelling before Close abandons the request.
		cancel()
		_ = w.Close()
		return nil, fmt.Errorf("write %d of %d bytes: %w", n, size, err)
	}
	if n != size {
		cancel()
		_ = w.Close()
		return nil, fmt.Errorf("%w: read %d bytes of %d", store.ErrBodyChanged, n, size)
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return w.Attrs(), nil
}

// GetRange implements store.Reader: one objects.get (alt=media) request.
// A zero length returns an empty body without a request: there is no
// valid Range header for zero bytes.
func (s *Store) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if off < 0 {
		return nil, &store.Error{Op: "objects.get", Key: key, Err: fmt.Errorf("%w: negative offset %d", store.ErrInvalidRange, off)}
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	r, err := s.bucket.Object(key).NewRangeReader(oneRequest(ctx), off, length)
	if err != nil {
		return nil, classify("objects.get", key, err)
	}
	if off > 0 && r.Attrs.StartOffset != off {
		// A server (or proxy) that ignored the range sent other bytes;
		// handing them out would corrupt every frame after.
		r.Close()
		return nil, &store.Error{Op: "objects.get", Key: key, Err: fmt.Errorf("asked for bytes from %d, got from %d", off, r.Attrs.StartOffset)}
	}
	// From offset 0 the SDK takes a whole object answered for a range;
	// the caller asked for length bytes and gets no more.
	var body io.Reader = r
	if length > 0 {
		body = io.LimitReader(r, length)
	}
	return stall.Classified(r, body, func(err error) error { return classify("objects.get", key, err) }), nil
}

// List implements store.Lister: objects.list pages of up to 1000. The
// part objects of multipart uploads (under a reserved prefix) are never
// listed.
func (s *Store) List(ctx context.Context, prefix, delimiter string) ([]store.ObjectInfo, []string, error) {
	q := &storage.Query{Prefix: prefix, Delimiter: delimiter}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated"}); err != nil {
		return nil, nil, err
	}
	var objects []store.ObjectInfo
	var prefixes []string
	it := s.bucket.Objects(ctx, q)
	for {
		a, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, nil, classify("objects.list", prefix, err)
		}
		switch {
		case a.Prefix != "":
			if !isReserved(a.Prefix) {
				prefixes = append(prefixes, a.Prefix)
			}
		case !isReserved(a.Name):
			objects = append(objects, store.ObjectInfo{Key: a.Name, Size: a.Size, LastModified: a.Updated})
		}
	}
	// The service returns objects and prefixes each in name order; the
	// iterator hands them out page by page, interleaved.
	slices.SortFunc(objects, func(a, b store.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	slices.Sort(prefixes)
	return objects, prefixes, nil
}

// Delete implements store.Deleter: one objects.delete per key (the JSON
// API has no multi-object delete outside its batch endpoint), at most
// Options.DeleteConcurrency at once. Keys that do not exist are not
// errors; the first failure stops the rest and is returned.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	// Every key is tried even when another fails, as S3's DeleteObjects
	// answers per key: a retry of the call then finds the deleted ones
	// gone (not an error) and has only the failed ones left to delete.
	var g errgroup.Group
	g.SetLimit(s.deletes)
	var mu sync.Mutex
	var errs []error
	for _, key := range keys {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if err := s.deleteObject(ctx, key); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
	}
	g.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("delete %d of %d objects: %w", len(errs), len(keys), errors.Join(errs...))
	}
	return classify("objects.delete", "", ctx.Err())
}

// deleteObject deletes one object; a missing one is not an error.
func (s *Store) deleteObject(ctx context.Context, key string) error {
	err := s.bucket.Object(key).Delete(ctx)
	if errors.Is(err, storage.ErrObjectNotExist) {
		return nil
	}
	return classify("objects.delete", key, err)
}
