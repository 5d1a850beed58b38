package durashuffle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/store"
)

// TestEncryptionKeysAreChecked: two key sources, a KMS endpoint without
// a KMS key, a malformed key (never quoted back) or a key file others
// can read are configuration errors naming the key, before any request.
func TestEncryptionKeysAreChecked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := filepath.Join(dir, "open.key")
	if err := os.WriteFile(open, []byte(strings.Repeat("ab", 32)), 0o644); err != nil {
		t.Fatal(err)
	}
	const secret = "not-a-key-but-a-secret"
	for _, tc := range []struct {
		name string
		set  func(*durashuffle.Config)
		opts []durashuffle.Option
		want string
	}{
		{"two sources", func(c *durashuffle.Config) {
			c.Store.EncryptionKey, c.Store.EncryptionKMSKeyID = strings.Repeat("ab", 32), "alias/k"
		}, nil, "encryption_kms_key_id must be set alone"},
		{"endpoint alone", func(c *durashuffle.Config) { c.Store.EncryptionKMSEndpoint = "http://127.0.0.1:1" }, nil, "encryption_kms_endpoint must be set only with encryption_kms_key_id"},
		{"malformed key", func(c *durashuffle.Config) { c.Store.EncryptionKey = secret }, nil, "encryption_key"},
		{"key file others read", func(c *durashuffle.Config) { c.Store.EncryptionKeyFile = open }, nil, "chmod 600"},
		{"option and config", func(c *durashuffle.Config) { c.Store.EncryptionKeyFile = open }, []durashuffle.Option{durashuffle.WithEncryptionKey(make([]byte, 32))}, "one source"},
		{"short option key", func(*durashuffle.Config) {}, []durashuffle.Option{durashuffle.WithEncryptionKey(make([]byte, 16))}, "16 bytes"},
	} {
		cfg := durashuffle.DefaultConfig()
		cfg.Store.Bucket = "b"
		tc.set(&cfg)
		opts := append([]durashuffle.Option{durashuffle.WithStore(&store.Mem{})}, tc.opts...)
		c, err := durashuffle.Open(ctx, cfg, opts...)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, durashuffle.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: %v, want ErrInvalidConfig saying %q (and never the key)", tc.name, err, tc.want)
		}
	}
}
