package durashuffle

import (
	"context"
	"fmt"

	"github.com/durashuffle/durashuffle/internal/hedge"
	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
)

// Version is written into every manifest.
const Version = "durashuffle/0.1.0"

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
	readHedge *hedge.Hedger
	guard     commitGuard
}

// Open connects to the bucket of cfg with the AWS SDK (endpoint, region
// and credentials follow the usual AWS chain unless cfg sets them).
func Open(ctx context.Context, cfg Config, obs uploader.Observer) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: bucket is not set", ErrInvalidConfig)
	}
	counter := &store.Counter{}
	s3, err := s3store.New(ctx, StoreOptions(cfg, counter))
	if err != nil {
		return nil, err
	}
	return NewClient(s3, cfg, counter, obs), nil
}

// StoreOptions maps cfg to the S3 store's options, counting requests in
// counter (which may be nil). The connection cap covers the upload pool
// with its hedges and every reader window the sidecar may serve at once.
func StoreOptions(cfg Config, counter *store.Counter) s3store.Options {
	return s3store.Options{
		Bucket:             cfg.Bucket,
		Endpoint:           cfg.Endpoint,
		Region:             cfg.Region,
		PathStyle:          cfg.PathStyle,
		InsecureSkipVerify: cfg.InsecureSkipVerify,
		CAFile:             cfg.CAFile,
		SSE:                cfg.SSE,
		SSEKMSKeyID:        cfg.SSEKMSKeyID,
		Counter:            counter,
		MaxConns:           2*cfg.UploadConcurrency + cfg.MaxStreams*cfg.ReadAhead + 16,
	}
}

// NewClient builds a Client on an existing store (which must not retry by
// itself: the client adds the one retry layer). counter may be nil.
func NewClient(raw store.Store, cfg Config, counter *store.Counter, obs uploader.Observer) *Client {
	if counter == nil {
		counter = &store.Counter{}
	}
	var pool *uploader.Pool
	st := retry.Wrap(raw, retry.Policy{
		MaxAttempts: cfg.RetryMaxAttempts,
		BaseDelay:   cfg.RetryBaseDelay.D(),
		MaxDelay:    cfg.RetryMaxDelay.D(),
		Timeout:     cfg.RequestTimeout.D(),
		OnRetry: func(op, reason string) {
			if retry.Throttling(reason) {
				pool.Throttled()
			}
		},
	}, counter)
	pool = uploader.New(st, uploader.Config{
		ChunkSize:   int64(cfg.ChunkSize),
		Concurrency: cfg.UploadConcurrency,
		MaxBuffered: cfg.BufferedChunks(),
		Checksum:    cfg.Checksum == "crc32c",
		HedgeFactor: cfg.HedgeFactor,
		HedgeMin:    cfg.HedgeMinDelay.D(),

		CleanupTimeout: cfg.CleanupTimeout.D(),
	}, obs)
	c := &Client{cfg: cfg, st: st, pool: pool, counter: counter, layout: manifest.Layout{Prefix: cfg.Prefix, Spread: cfg.KeySpread}}
	if cfg.HedgeFactor > 0 {
		c.readHedge = hedge.New(cfg.HedgeFactor, cfg.HedgeMinDelay.D())
	}
	return c
}

// Close stops the upload pool. Writers must be committed or aborted.
func (c *Client) Close() { c.pool.Close() }

// Config returns the client's configuration.
func (c *Client) Config() Config { return c.cfg }

// Store returns the store with its retry layer.
func (c *Client) Store() store.Store { return c.st }

// Counter returns the request counter.
func (c *Client) Counter() *store.Counter { return c.counter }

// Pool returns the shared upload pool.
func (c *Client) Pool() *uploader.Pool { return c.pool }

// Layout returns the object layout under the configured prefix.
func (c *Client) Layout() manifest.Layout { return c.layout }

// Seal merges the manifests of workers "0".."workers-1" into the stage's
// index and manifest (manifest.Seal: a streaming merge in bounded
// memory); it fails naming the workers that have not committed.
func (c *Client) Seal(ctx context.Context, query string, stage, workers int) (*manifest.Stage, error) {
	if workers < 1 {
		return nil, fmt.Errorf("seal %s stage %d: workers must be at least 1, got %d", query, stage, workers)
	}
	ids := make([]string, workers)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	return c.SealWorkers(ctx, query, stage, ids)
}

// SealWorkers is Seal with explicit worker IDs.
func (c *Client) SealWorkers(ctx context.Context, query string, stage int, workers []string) (*manifest.Stage, error) {
	if err := manifest.ValidateID("query", query); err != nil {
		return nil, err
	}
	if err := manifest.ValidateStage(stage); err != nil {
		return nil, err
	}
	// The stage manifest is a conditional put too: a second seal with
	// other attempts must fail, not overwrite the first.
	if err := c.CheckCommitGuard(ctx); err != nil {
		return nil, fmt.Errorf("seal %s stage %d: %w", query, stage, err)
	}
	return manifest.Seal(ctx, c.st, c.layout, query, stage, workers)
}

// ReaderOptions are the reader settings of the client's configuration.
func (c *Client) ReaderOptions() reader.Options {
	gap := int64(c.cfg.ReadGapBytes)
	if gap == 0 {
		gap = -1 // config 0: only directly adjacent frames share a GET
	}
	return reader.Options{RangeBytes: int64(c.cfg.ReadRangeBytes), ReadAhead: c.cfg.ReadAhead, GapBytes: gap, Hedge: c.readHedge}
}

// ReadHedged returns how many ranged GETs of the client's stages were
// hedged and how many of those the second request won.
func (c *Client) ReadHedged() (hedged, won int64) {
	if c.readHedge == nil {
		return 0, 0
	}
	return c.readHedge.Stats()
}

// OpenStage opens a committed stage for reading: one GET when it is
// sealed, a LIST and a GET per worker manifest when it is not.
func (c *Client) OpenStage(ctx context.Context, query string, stage int) (*reader.Stage, error) {
	return reader.Open(ctx, c.st, c.layout, query, stage, c.ReaderOptions())
}
