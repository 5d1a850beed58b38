package durashuffle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/durashuffle/durashuffle/internal/keys"
	"github.com/durashuffle/durashuffle/internal/memstore"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
	"github.com/prometheus/client_golang/prometheus"
)

// version is written into every worker manifest (WriterVersion).
const version = "durashuffle/0.1.0"

// Client is durashuffle in one process: the store with its retry layer,
// the request counter and the upload pool that every writer shares. Safe
// for concurrent use.
type Client struct {
	cfg     Config
	st      store.Store
	pool    *uploader.Pool
	counter *store.Counter
	layout  manifest.Layout
	// readHedge times the ranged GETs of every stage the client opens
	// (nil: hedge_factor 0, no hedging).
	readHedge *reader.Hedger
	guard     commitGuard
	fast      fastPath  // memory store and peers (client_fast.go)
	spill     *spillDir // nil: spill off
	// keys gives each query's root key when the client encrypts its
	// frames (encryption.go); nil: it does not.
	keys keys.Provider
}

// Open returns a Client for cfg. cfg is validated first; an invalid key
// is an error wrapping ErrInvalidConfig that names the key, the allowed
// range and the value. By default the client talks to the bucket of cfg
// with the AWS SDK (endpoint, region and credentials follow the usual AWS
// chain unless cfg or an option sets them); WithStore puts it on a store
// of the caller's own instead. Open sends no request: a missing bucket or
// a wrong credential shows in the first write or read.
func Open(ctx context.Context, cfg Config, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.counter == nil {
		o.counter = &store.Counter{}
	}
	st := o.store
	if st == nil && (cfg.Store.Type == "azure" || cfg.Store.Type == "gcs") {
		return nil, fmt.Errorf("%w: store %s is opened with its own package (store/azstore, store/gcsstore) and WithStore; the library links only the S3 SDK", ErrInvalidConfig, cfg.Store.Type)
	}
	if st == nil {
		if cfg.Store.Bucket == "" {
			return nil, fmt.Errorf("%w: bucket is not set", ErrInvalidConfig)
		}
		so := storeOptions(cfg, o.counter)
		so.AWS, so.HTTPClient = o.aws, o.httpClient
		if o.credentials != nil {
			so.Credentials = o.credentials
		}
		s3, err := s3store.New(ctx, so)
		if err != nil {
			return nil, err
		}
		st = s3
	}
	obs := o.observer
	var m *metrics.Library
	if o.registerer != nil {
		m = metrics.NewLibrary()
		if obs == nil {
			obs = m
		} else {
			obs = observers{obs, m}
		}
	}
	c := newClient(st, cfg, o.counter, obs)
	kp, err := keyProvider(ctx, cfg, o, c)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.keys = kp
	if m != nil {
		if err := m.Register(o.registerer, c.counter, c.pool.Concurrency, metrics.CommitGuardStates, func() string { return string(c.CommitGuard().State) }); err != nil {
			c.Close()
			return nil, fmt.Errorf("register the client's metrics: %w", err)
		}
	}
	return c, nil
}

// The metrics observe the upload pool, the memory store and the reader
// without importing them (metrics sits below them all): these
// assertions, here where both sides are visible, keep their method sets
// in step.
var (
	_ uploader.Observer = (*metrics.Metrics)(nil)
	_ uploader.Observer = (*metrics.Library)(nil)
	_ memstore.Observer = (*metrics.Library)(nil)
	_ reader.Observer   = (*metrics.Library)(nil)
)

// An Option adds to what Open builds: a store of the caller's own, an AWS
// configuration or HTTP client for the S3 store, an observer, metrics.
type Option func(*options)

type options struct {
	store       store.Store
	counter     *store.Counter
	observer    Observer
	registerer  prometheus.Registerer
	aws         *aws.Config
	httpClient  *http.Client
	credentials aws.CredentialsProvider
	// encryptionKey: WithEncryptionKey's root key.
	encryptionKey []byte
}

// WithStore puts the client on st instead of an S3 store built from cfg
// (cfg's bucket, endpoint, region and TLS keys are then unused). st must
// not retry by itself: the client adds the one retry layer. Check a store
// of your own with storetest.Run.
func WithStore(st store.Store) Option { return func(o *options) { o.store = st } }

// WithCounter counts every request the store sends (by operation and
// status) and every retry in c, which the caller may read at any time;
// Client.Counter returns it. Without it the client counts in a Counter of
// its own.
func WithCounter(c *store.Counter) Option { return func(o *options) { o.counter = c } }

// WithObserver sends the client's upload events to obs, for metrics or
// progress of the caller's own: see Observer for what it receives.
func WithObserver(obs Observer) Option { return func(o *options) { o.observer = obs } }

// An Observer receives the upload pool's events, from many goroutines at
// once: Queued when parts wait for an upload slot (delta +1, a chunk
// each; an object's tail re-cut at Commit adds or withdraws a few at
// once) or leave the queue (-1), Buffered with the bytes held in chunk
// buffers after each change, PartDone when a part or single put
// finished (time queued, time uploading) and Uploaded with the bytes it
// stored. It must not block.
//
// An Observer that also has the methods of reader.Observer receives what
// the client's readers count: the client passes it as
// reader.Options.Observer of every stage it opens.
type Observer = uploader.Observer

// WithRegisterer registers the client's metrics on reg: requests by
// operation and code, retries by operation and reason, bytes uploaded,
// chunks queued and buffered, part latency, the pool's upload concurrency,
// the commit guard's state, the memory store's bytes and stored bytes
// read by source (memory, peer, s3) with the fallbacks by reason (the names are those the sidecar exports,
// listed in docs/operations.md). Open fails if reg already holds them.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.registerer = reg }
}

// WithAWSConfig builds the S3 store on cfg (credentials, region, HTTP
// client, middleware such as tracing) instead of loading the default AWS
// chain. The store still turns off the SDK's own retries and sends its
// own CRC32C checksums; Config's endpoint, region and path_style still
// apply when set.
func WithAWSConfig(cfg aws.Config) Option { return func(o *options) { o.aws = &cfg } }

// WithHTTPClient sends the S3 store's requests through h instead of a
// client sized from cfg (upload_concurrency, max_streams, read_ahead)
// with insecure_skip_verify applied. Size its connection pool to the
// parts and ranged GETs in flight, or they queue there.
func WithHTTPClient(h *http.Client) Option { return func(o *options) { o.httpClient = h } }

// WithCredentials signs the S3 store's requests with p instead of the
// credentials of the AWS chain (for example
// credentials.NewStaticCredentialsProvider, or embedded.Server's).
func WithCredentials(p aws.CredentialsProvider) Option {
	return func(o *options) { o.credentials = p }
}

// storeOptions maps cfg to the S3 store's options, counting requests in
// counter (which may be nil). The connection cap covers the upload pool
// with its hedges and every reader window the sidecar may serve at once.
func storeOptions(cfg Config, counter *store.Counter) s3store.Options {
	return s3store.Options{
		Bucket:             cfg.Store.Bucket,
		Endpoint:           cfg.Store.Endpoint,
		Region:             cfg.Store.Region,
		PathStyle:          cfg.Store.PathStyle,
		InsecureSkipVerify: cfg.Store.InsecureSkipVerify,
		CAFile:             cfg.Store.CAFile,
		NoChecksums:        cfg.Write.Checksum == "none",
		SSE:                cfg.Store.SSE,
		SSEKMSKeyID:        cfg.Store.SSEKMSKeyID,
		Counter:            counter,
		MaxConns:           cfg.StoreConns(),
		ConnectTimeout:     cfg.Store.ConnectTimeout.D(),
		FirstByteTimeout:   cfg.Store.FirstByteTimeout.D(),
	}
}

// newClient builds a Client on st, which must not retry by itself.
func newClient(raw store.Store, cfg Config, counter *store.Counter, obs Observer) *Client {
	var pool *uploader.Pool
	st := retry.Wrap(raw, retry.Policy{
		MaxAttempts: cfg.Store.RetryMaxAttempts,
		BaseDelay:   cfg.Store.RetryBaseDelay.D(),
		MaxDelay:    cfg.Store.RetryMaxDelay.D(),
		Timeout:     cfg.Store.RequestTimeout.D(),
		OnRetry: func(op, reason string) {
			if retry.Throttling(reason) {
				pool.Throttled()
			}
		},
	}, counter)
	pool = uploader.New(st, uploader.Config{
		ChunkSize:   int64(cfg.Write.ChunkSize),
		Concurrency: cfg.Write.UploadConcurrency,
		MaxBuffered: cfg.BufferedChunks(),
		Checksum:    cfg.Write.Checksum == "crc32c",
		HedgeFactor: partHedge(cfg),
		HedgeMin:    cfg.Hedge.MinDelay.D(),
		MaxPartSize: int64(cfg.Write.MaxPartSize),

		CleanupTimeout: cfg.Write.CleanupTimeout.D(),
	}, obs)
	c := &Client{cfg: cfg, st: st, pool: pool, counter: counter, layout: manifest.Layout{Prefix: cfg.Store.Prefix, Spread: cfg.Write.KeySpread}, spill: newSpillDir(cfg)}
	if cfg.Hedge.Factor > 0 {
		c.readHedge = reader.NewHedger(cfg.Hedge.Factor, cfg.Hedge.MinDelay.D())
	}
	c.fast.init(cfg, obs)
	return c
}

// CreateBucket creates the configured bucket if it does not exist
// (idempotent; safe to race with other callers), through the retry layer
// as every other request: HeadBucket, then CreateBucket if it is missing.
// It is for trials and tests: production buckets come with their
// lifecycle rules from the operator (docs/operations.md). On a store
// given with WithStore it is an error wrapping errors.ErrUnsupported
// unless that store implements store.BucketMaker.
func (c *Client) CreateBucket(ctx context.Context) error {
	b, ok := store.As[store.BucketMaker](c.st)
	if !ok {
		return fmt.Errorf("create bucket %s: the client's store (%T) cannot create buckets: %w", c.cfg.Store.Bucket, c.st, errors.ErrUnsupported)
	}
	if err := b.EnsureBucket(ctx); err != nil {
		return fmt.Errorf("create bucket %s: %w", c.cfg.Store.Bucket, err)
	}
	return nil
}

// Close stops the upload pool and removes the client's spill directory.
// Writers must be committed or aborted.
func (c *Client) Close() {
	c.pool.Close()
	c.spill.close()
}

// Config returns the client's configuration.
func (c *Client) Config() Config { return c.cfg }

// Store returns the store with its retry layer.
func (c *Client) Store() store.Store { return c.st }

// Counter returns the request counter.
func (c *Client) Counter() *store.Counter { return c.counter }

// Stats is a snapshot of the upload pool that every writer of a client
// shares.
type Stats struct {
	Concurrency  int   // parts uploaded at once: upload_concurrency, lowered while the store throttles
	InFlight     int64 // parts being uploaded now
	Buffered     int64 // chunk buffers held now, queued, filling or in flight
	MaxBuffered  int   // the buffers there are (max_buffered_chunks)
	PeakBuffered int64 // most buffers held at once since Open
	// Resent counts parts streamed while their chunks filled whose chunk
	// then ended short (an object's last): the part was sent again whole.
	Resent int64
	// Hedged counts part uploads sent a second time because the first
	// was late (hedge_factor), and HedgesWon those the second finished
	// first. Both are 0 with hedge_factor 0.
	Hedged, HedgesWon int64
	// ReadsHedged counts the ranged GETs of the client's stages sent a
	// second time because the first was late, and ReadHedgesWon those the
	// second answered first. Both are 0 with hedge_factor 0.
	ReadsHedged, ReadHedgesWon int64
}

// Stats returns the upload pool's state now, and the hedged requests so
// far.
func (c *Client) Stats() Stats {
	s := c.pool.Stats()
	st := Stats{
		Concurrency: c.pool.Concurrency(), InFlight: s.InFlight, Buffered: s.Buffered,
		MaxBuffered: c.pool.Config().MaxBuffered, PeakBuffered: s.PeakBuffered, Resent: s.Resent,
	}
	st.Hedged, st.HedgesWon = c.pool.Hedged()
	if c.readHedge != nil {
		st.ReadsHedged, st.ReadHedgesWon = c.readHedge.Stats()
	}
	return st
}

// Layout returns the object layout under the configured prefix.
func (c *Client) Layout() manifest.Layout { return c.layout }

// Seal merges the manifests of workers "0".."workers-1" into the stage's
// index and manifest (manifest.Seal: a streaming merge in bounded
// memory); it fails naming the workers that have not committed. The
// stage manifest is a conditional put too, so the commit guard is
// checked first: a second seal with other attempts must fail, not
// overwrite the first.
func (c *Client) Seal(ctx context.Context, query string, stage, workers int) (*manifest.Stage, error) {
	if err := manifest.ValidateID("query", query); err != nil {
		return nil, err
	}
	if err := manifest.ValidateStage(stage); err != nil {
		return nil, err
	}
	if workers < 1 {
		return nil, fmt.Errorf("seal %s stage %d: workers must be at least 1, got %d", query, stage, workers)
	}
	// Checked before the IDs are made: a count from the wire must not
	// size an allocation.
	if workers > manifest.MaxSealWorkers {
		return nil, fmt.Errorf("%w: seal %s stage %d: %d workers, at most %d (MaxSealWorkers)", manifest.ErrTooManyWorkers, query, stage, workers, manifest.MaxSealWorkers)
	}
	if err := c.CheckCommitGuard(ctx); err != nil {
		return nil, fmt.Errorf("seal %s stage %d: %w", query, stage, err)
	}
	ids := make([]string, workers)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	return manifest.Seal(ctx, c.st, c.layout, query, stage, ids)
}

// ReaderOptions are the reader settings of the client's configuration.
func (c *Client) ReaderOptions() reader.Options {
	gap := int64(c.cfg.Read.GapBytes)
	if gap == 0 {
		gap = -1 // config 0: only directly adjacent frames share a GET
	}
	o := reader.Options{RangeBytes: int64(c.cfg.Read.RangeBytes), SpanBytes: int64(c.cfg.Read.SpanBytes), ReadAhead: c.cfg.Read.Ahead, GapBytes: gap, Hedge: c.readHedge}
	c.fast.readerOptions(&o)
	return o
}

// OpenStage opens a committed stage for reading: one GET when it is
// sealed, a LIST and a GET per worker manifest when it is not.
func (c *Client) OpenStage(ctx context.Context, query string, stage int) (*reader.Stage, error) {
	o := c.ReaderOptions()
	var err error
	if o.Key, err = c.ReaderKey(ctx, query, stage); err != nil {
		return nil, err
	}
	return reader.Open(ctx, c.st, c.layout, query, stage, o)
}

// observers sends each event to every observer that takes it: the
// pool's events to all, the memory store's and the reader's to those
// that have their methods (the process's metrics do; a caller's observer
// may). The fan-out is each; every method below is one call of it.
type observers []Observer

// each calls f with every observer that is a T.
func each[T any](os observers, f func(T)) {
	for _, o := range os {
		if t, ok := o.(T); ok {
			f(t)
		}
	}
}

func (os observers) Queued(delta int)       { each(os, func(o Observer) { o.Queued(delta) }) }
func (os observers) Buffered(bytes int64)   { each(os, func(o Observer) { o.Buffered(bytes) }) }
func (os observers) Uploaded(bytes int64)   { each(os, func(o Observer) { o.Uploaded(bytes) }) }
func (os observers) Fallback(reason string) { each(os, func(o reader.Observer) { o.Fallback(reason) }) }
func (os observers) PartDone(queued, upload time.Duration) {
	each(os, func(o Observer) { o.PartDone(queued, upload) })
}
func (os observers) Served(source string, n int64) {
	each(os, func(o reader.Observer) { o.Served(source, n) })
}
func (os observers) MemstoreBytes(n int64) {
	each(os, func(o memstore.Observer) { o.MemstoreBytes(n) })
}
func (os observers) MemstoreAdmitted(n int64) {
	each(os, func(o memstore.Observer) { o.MemstoreAdmitted(n) })
}
func (os observers) MemstoreDeclined(n int64) {
	each(os, func(o memstore.Observer) { o.MemstoreDeclined(n) })
}
func (os observers) MemstoreEvicted(n int64) {
	each(os, func(o memstore.Observer) { o.MemstoreEvicted(n) })
}
func (os observers) MemstoreReleased(n int64) {
	each(os, func(o memstore.Observer) { o.MemstoreReleased(n) })
}

// partHedge is the hedge factor of part uploads: none where two requests
// of one part's bytes may be answered with different names for it, since
// the one the store keeps is the one that landed last, which the client
// cannot tell: S3 with SSE-KMS (a part's ETag is no digest of its
// bytes), and GCS without CRC32Cs (the part is composed at the
// generation its answer named). Range reads are hedged either way.
func partHedge(cfg Config) float64 {
	switch {
	case cfg.Store.SSE == "aws:kms":
		return 0
	case cfg.Store.Type == "gcs" && cfg.Write.Checksum != "crc32c":
		return 0
	}
	return cfg.Hedge.Factor
}
