package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/azstore"
	"github.com/durashuffle/durashuffle/store/gcsstore"
)

// Store kinds, as the configuration's store key names them.
const (
	KindS3    = "s3"
	KindAzure = "azure"
	KindGCS   = "gcs"
)

// EnvAzureKey is the environment variable holding an Azure storage
// account's Shared Key, as every durashuffle command reads it; the
// bench's children inherit it. Without it, Azure's default credential
// chain signs.
const EnvAzureKey = "AZURE_STORAGE_KEY"

// StoreKind is the kind of store cfg names (S3 when it names none).
func StoreKind(cfg durashuffle.Config) string {
	switch cfg.Store.Type {
	case KindAzure, KindGCS:
		return cfg.Store.Type
	}
	return KindS3
}

// serviceURL is the URL the link stands in front of: the configured
// endpoint, or the service's own.
func serviceURL(cfg durashuffle.Config) (string, error) {
	if cfg.Store.Endpoint != "" {
		return cfg.Store.Endpoint, nil
	}
	switch StoreKind(cfg) {
	case KindAzure:
		if cfg.Store.AzureAccount == "" {
			return "", errors.New("store azure needs azure_account (or an endpoint)")
		}
		return "https://" + cfg.Store.AzureAccount + ".blob.core.windows.net", nil
	case KindGCS:
		return "https://storage.googleapis.com", nil
	}
	return "", errors.New("store s3 needs an endpoint here")
}

// openKind opens the store of cfg's kind on bucket, its requests sent by
// hc (nil: the store's own client) and counted in counter; endpoint is
// S3's (the in-process one when embedded, with the bench's keys).
func openKind(ctx context.Context, cfg durashuffle.Config, endpoint, bucket string, embedded bool, hc *http.Client, counter *store.Counter) (store.Store, error) {
	switch StoreKind(cfg) {
	case KindAzure:
		o := azstore.Options{Container: bucket, AccountName: cfg.Store.AzureAccount, AccountKey: os.Getenv(EnvAzureKey),
			Endpoint: cfg.Store.Endpoint, Counter: counter, HTTPClient: hc, MaxConns: cfg.StoreConns()}
		st, err := azstore.New(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("store azure, container %s: %w", bucket, err)
		}
		return st, nil
	case KindGCS:
		o := gcsstore.Options{Bucket: bucket, ProjectID: cfg.Store.GCSProject, Endpoint: cfg.Store.Endpoint,
			Counter: counter, MaxConns: cfg.StoreConns()}
		if hc != nil {
			o.HTTPTransport = hc.Transport
		}
		st, err := gcsstore.New(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("store gcs, bucket %s: %w", bucket, err)
		}
		return st, nil
	}
	o := s3store.Options{Bucket: bucket, Endpoint: endpoint, Region: cfg.Store.Region, PathStyle: cfg.Store.PathStyle,
		CAFile: cfg.Store.CAFile, InsecureSkipVerify: cfg.Store.InsecureSkipVerify, Counter: counter, HTTPClient: hc}
	if embedded {
		o.AccessKeyID, o.SecretAccessKey = "durashuffle", "durashuffle"
	}
	st, err := s3store.New(ctx, o)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// getOp is the store's name for a GET of an object (a ranged read), as
// its counter records it.
func getOp(kind string) string {
	switch kind {
	case KindAzure:
		return "GetBlob"
	case KindGCS:
		return "objects.get"
	}
	return "GetObject"
}

// Baselines are each store's SDK helpers that write and read compare
// durashuffle with: what a user of that SDK would otherwise run.
var Baselines = map[string][]string{
	KindS3:    {TransferManager, Manager},
	KindAzure: {AzBlob},
	KindGCS:   {GCSClient},
}

// isBaseline says whether name is some store's baseline.
func isBaseline(name string) bool {
	for _, bs := range Baselines {
		for _, b := range bs {
			if b == name {
				return true
			}
		}
	}
	return false
}

// storeLabel names the store of a run for its report.
func storeLabel(cfg durashuffle.Config, url string) string {
	switch StoreKind(cfg) {
	case KindAzure:
		return "Azure Blob Storage at " + strings.TrimSuffix(url, "/")
	case KindGCS:
		return "Google Cloud Storage at " + strings.TrimSuffix(url, "/")
	}
	return url
}
