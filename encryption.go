package durashuffle

import (
	"context"
	"fmt"

	"github.com/durashuffle/durashuffle/internal/keys"
	"github.com/durashuffle/durashuffle/manifest"
)

// WithEncryptionKey seals every frame the client writes, and opens every
// stage it reads, under stage keys derived from root (32 bytes; HKDF-SHA256
// with the query and stage): the key an engine holds in memory, never
// written anywhere by durashuffle. It is the encryption_key of the
// configuration, handed over without a file; set with any of the
// configuration's encryption keys, Open fails.
func WithEncryptionKey(root []byte) Option {
	return func(o *options) { o.encryptionKey = append([]byte(nil), root...) }
}

// keyProvider builds the client's source of root keys from cfg and the
// options: nil when nothing is encrypted.
func keyProvider(ctx context.Context, cfg Config, o options, c *Client) (keys.Provider, error) {
	var root []byte
	var err error
	switch {
	case o.encryptionKey != nil && (cfg.Store.EncryptionKey != "" || cfg.Store.EncryptionKeyFile != "" || cfg.Store.EncryptionKMSKeyID != ""):
		return nil, fmt.Errorf("%w: WithEncryptionKey and a configured encryption key: the stage key comes from one source", ErrInvalidConfig)
	case o.encryptionKey != nil:
		root = o.encryptionKey
	case cfg.Store.EncryptionKey != "":
		if root, err = keys.Parse(cfg.Store.EncryptionKey); err != nil {
			return nil, fmt.Errorf("%w: encryption_key: %v", ErrInvalidConfig, err)
		}
	case cfg.Store.EncryptionKeyFile != "":
		if root, err = keys.ReadFile(cfg.Store.EncryptionKeyFile); err != nil {
			return nil, fmt.Errorf("%w: encryption_key_file: %v", ErrInvalidConfig, err)
		}
	case cfg.Store.EncryptionKMSKeyID != "":
		return kmsProvider(ctx, cfg, o, c.st, c.layout)
	default:
		return nil, nil
	}
	p, err := keys.NewStatic(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return p, nil
}

// stageKey returns the key of query's stage and what its worker
// manifests record; nil, nil when the client does not encrypt.
func (c *Client) stageKey(ctx context.Context, query string, stage int, root []byte) ([]byte, *manifest.Encryption, error) {
	p := c.keys
	if root != nil {
		var err error
		if p, err = keys.NewStatic(root); err != nil {
			return nil, nil, fmt.Errorf("key of %s stage %d: %w", query, stage, err)
		}
	}
	if p == nil {
		return nil, nil, nil
	}
	k, e, err := keys.Stage(ctx, p, query, stage, true)
	if err != nil {
		return nil, nil, fmt.Errorf("key of %s stage %d: %w", query, stage, err)
	}
	return k, e, nil
}

// ReaderKey returns the root key of query that the client's readers of
// its stage open it with (reader.Options.Key): nil when the client does
// not encrypt. With KMS it costs one Decrypt per query per client.
func (c *Client) ReaderKey(ctx context.Context, query string, stage int) ([]byte, error) {
	if c.keys == nil {
		return nil, nil
	}
	root, _, err := c.keys.Root(ctx, query, false)
	if err != nil {
		return nil, fmt.Errorf("key of %s stage %d: %w", query, stage, err)
	}
	return root, nil
}
