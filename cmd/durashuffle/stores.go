package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/azstore"
	"github.com/durashuffle/durashuffle/store/gcsstore"
)

// Environment variables that carry a cloud store's secrets: never a key
// of the configuration file, so that a file shared by commands holds
// none, and never logged.
const (
	envAzureConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	envAzureKey              = "AZURE_STORAGE_KEY"
)

// openClient opens a client on cfg's store with opts and the app's own
// options. The library opens S3 itself; Azure Blob Storage and Google
// Cloud Storage are opened here, with their stores' modules, which only
// the command line links, and handed to the client with WithStore
// (their requests counted in counter, a new one when nil).
func (a *app) openClient(ctx context.Context, cfg durashuffle.Config, counter *store.Counter, opts ...durashuffle.Option) (*durashuffle.Client, error) {
	opts = append(opts, a.clientOptions...)
	if counter == nil {
		counter = a.counter
	}
	if counter == nil {
		counter = &store.Counter{}
	}
	st, err := a.cloudStore(ctx, cfg, counter)
	if err != nil {
		return nil, err
	}
	if st != nil {
		opts = append(opts, durashuffle.WithStore(st))
	}
	return durashuffle.Open(ctx, cfg, append(opts, durashuffle.WithCounter(counter))...)
}

// cloudStore is the store cfg names when it is not S3 (nil for S3), its
// requests counted in counter.
func (a *app) cloudStore(ctx context.Context, cfg durashuffle.Config, counter *store.Counter) (store.Store, error) {
	switch cfg.Store.Type {
	case "azure":
		if cfg.Store.Bucket == "" {
			return nil, fmt.Errorf("%w: bucket (the container) is not set; store azure needs one", durashuffle.ErrInvalidConfig)
		}
		o := azstore.Options{
			Container:        cfg.Store.Bucket,
			AccountName:      cfg.Store.AzureAccount,
			Endpoint:         cfg.Store.Endpoint,
			ConnectionString: a.getenv(envAzureConnectionString),
			Counter:          counter,
			ConnectTimeout:   time.Duration(cfg.Store.ConnectTimeout),
			FirstByteTimeout: time.Duration(cfg.Store.FirstByteTimeout),
			MaxConns:         cfg.StoreConns(),
		}
		if a.transport != nil {
			o.HTTPClient = &http.Client{Transport: a.transport}
		}
		if o.ConnectionString == "" {
			if o.AccountName == "" && o.Endpoint == "" {
				return nil, fmt.Errorf("%w: azure_account is not set; store azure needs the storage account (or %s)", durashuffle.ErrInvalidConfig, envAzureConnectionString)
			}
			o.AccountKey = a.getenv(envAzureKey)
		}
		st, err := azstore.New(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("store azure, container %s: %w", cfg.Store.Bucket, err)
		}
		return st, nil
	case "gcs":
		if cfg.Store.Bucket == "" {
			return nil, fmt.Errorf("%w: bucket is not set; store gcs needs one", durashuffle.ErrInvalidConfig)
		}
		st, err := gcsstore.New(ctx, gcsstore.Options{
			Bucket:           cfg.Store.Bucket,
			ProjectID:        cfg.Store.GCSProject,
			Endpoint:         cfg.Store.Endpoint,
			Counter:          counter,
			ConnectTimeout:   time.Duration(cfg.Store.ConnectTimeout),
			FirstByteTimeout: time.Duration(cfg.Store.FirstByteTimeout),
			MaxConns:         cfg.StoreConns(),
			HTTPTransport:    a.transport,
		})
		if err != nil {
			return nil, fmt.Errorf("store gcs, bucket %s: %w", cfg.Store.Bucket, err)
		}
		return st, nil
	}
	return nil, nil
}
