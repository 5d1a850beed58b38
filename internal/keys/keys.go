package keys

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Size is the size of every root and stage key: AES-256.
const Size = 32

// ErrKey marks a key that is missing, malformed or not the stage's.
var ErrKey = errors.New("encryption key")

// StageKey derives the key of query's stage from root: HKDF-SHA256 with
// no salt and the info "durashuffle stage key v1", query and stage,
// each after a NUL. Distinct stages get independent keys, so one stage's
// key opens no other's frames.
func StageKey(root []byte, query string, stage int) ([]byte, error) {
	if len(root) != Size {
		return nil, fmt.Errorf("%w: a root key of %d bytes, want %d", ErrKey, len(root), Size)
	}
	info := "durashuffle stage key v1\x00" + query + "\x00" + strconv.Itoa(stage)
	return hkdf.Key(sha256.New, root, nil, info, Size)
}

// Fingerprint names key in a manifest without revealing it: the first
// 16 bytes of HMAC-SHA256 of a fixed label under the key, in hex.
func Fingerprint(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("durashuffle key fingerprint v1"))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// Parse reads a root key written as 64 hex digits or as base64 (standard
// or URL alphabet, padded or not) of 32 bytes; surrounding space is
// ignored. The error never quotes s.
func Parse(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*Size {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == Size {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: %d characters that are neither 64 hex digits nor base64 of %d bytes", ErrKey, len(s), Size)
}

// ReadFile reads a root key file: exactly 32 raw bytes, or the key as
// Parse reads it. A file others may read is refused: the key opens every
// stage written with it.
func ReadFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w file: %v", ErrKey, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w file %s: mode %v lets others read it; chmod 600", ErrKey, path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w file: %v", ErrKey, err)
	}
	if len(b) == Size {
		return b, nil
	}
	k, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return k, nil
}
