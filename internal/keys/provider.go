package keys

import (
	"context"
	"fmt"

	"github.com/durashuffle/durashuffle/manifest"
)

// Cipher is what manifests record of the frames' encryption.
const Cipher = "aes-256-gcm"

// Provider gives the root key of a query. Safe for concurrent use.
type Provider interface {
	// Root returns query's root key and how the manifest describes its
	// source (Cipher, Source, KMSKeyID; the fingerprint is the stage
	// key's, filled by Stage). create: the caller writes, and may make
	// the query's key if it has none yet.
	Root(ctx context.Context, query string, create bool) ([]byte, manifest.Encryption, error)
}

// Static is one root key for every query: handed in memory, or read
// from a key file or the environment.
type Static struct{ key []byte }

// NewStatic returns the provider of root, which must be Size bytes.
func NewStatic(root []byte) (*Static, error) {
	if len(root) != Size {
		return nil, fmt.Errorf("%w: a root key of %d bytes, want %d", ErrKey, len(root), Size)
	}
	return &Static{key: append([]byte(nil), root...)}, nil
}

// Root returns the key.
func (s *Static) Root(context.Context, string, bool) ([]byte, manifest.Encryption, error) {
	return s.key, manifest.Encryption{Cipher: Cipher, Source: "key"}, nil
}

// Stage returns the key of query's stage from p, and the encryption a
// worker manifest records for it.
func Stage(ctx context.Context, p Provider, query string, stage int, create bool) ([]byte, *manifest.Encryption, error) {
	root, e, err := p.Root(ctx, query, create)
	if err != nil {
		return nil, nil, err
	}
	sk, err := StageKey(root, query, stage)
	if err != nil {
		return nil, nil, err
	}
	e.Fingerprint = Fingerprint(sk)
	return sk, &e, nil
}
