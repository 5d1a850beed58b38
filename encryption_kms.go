package durashuffle

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/durashuffle/durashuffle/internal/keys"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// kmsProvider gives each query a data key of KMS key
// encryption_kms_key_id, stored wrapped at {query}/key.json in st (the
// client's store, with its retry layer). KMS calls are retried by the
// SDK's standard retryer (3 attempts, throttling included): the one
// retry layer of KMS requests, as the client's is of the store's. The
// AWS configuration is WithAWSConfig's, else the default chain's, with
// the configured region and WithCredentials' credentials.
func kmsProvider(ctx context.Context, cfg Config, o options, st store.Store, layout manifest.Layout) (keys.Provider, error) {
	var ac aws.Config
	if o.aws != nil {
		ac = o.aws.Copy()
	} else {
		var err error
		if ac, err = awsconfig.LoadDefaultConfig(ctx); err != nil {
			return nil, fmt.Errorf("encryption_kms_key_id %s: load AWS config: %w", cfg.Store.EncryptionKMSKeyID, err)
		}
	}
	if cfg.Store.Region != "" {
		ac.Region = cfg.Store.Region
	}
	if ac.Region == "" {
		ac.Region = "us-east-1"
	}
	if o.credentials != nil {
		ac.Credentials = o.credentials
	}
	client := kms.NewFromConfig(ac, func(ko *kms.Options) {
		if ep := cfg.Store.EncryptionKMSEndpoint; ep != "" {
			ko.BaseEndpoint = &ep
		}
	})
	return keys.NewKMS(client, cfg.Store.EncryptionKMSKeyID, st, func(query string) string {
		return layout.QueryPrefix(query) + keys.KeyName
	}), nil
}
