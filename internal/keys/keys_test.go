package keys

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStageKeysAreDistinct(t *testing.T) {
	root := bytes.Repeat([]byte{1}, Size)
	a, _ := StageKey(root, "q", 0)
	b, _ := StageKey(root, "q", 1)
	c, _ := StageKey(root, "q2", 0)
	again, _ := StageKey(root, "q", 0)
	if bytes.Equal(a, b) || bytes.Equal(a, c) || !bytes.Equal(a, again) || len(a) != Size {
		t.Fatalf("stage keys: q/0 %x, q/1 %x, q2/0 %x, q/0 again %x", a, b, c, again)
	}
	if bytes.Equal(a, root) || strings.Contains(Fingerprint(a), hex.EncodeToString(a[:8])) {
		t.Fatalf("the stage key is the root key, or its fingerprint shows it")
	}
	if Fingerprint(a) == Fingerprint(b) || len(Fingerprint(a)) != 32 {
		t.Fatalf("fingerprints %s and %s", Fingerprint(a), Fingerprint(b))
	}
	if _, err := StageKey(root[:16], "q", 0); !errors.Is(err, ErrKey) {
		t.Fatalf("a 16-byte root: %v", err)
	}
}

func TestParseAndReadFile(t *testing.T) {
	root := bytes.Repeat([]byte{0xab}, Size)
	for _, s := range []string{hex.EncodeToString(root), base64.StdEncoding.EncodeToString(root) + "\n", base64.RawURLEncoding.EncodeToString(root)} {
		if k, err := Parse(s); err != nil || !bytes.Equal(k, root) {
			t.Errorf("parse %q: %x, %v", s, k, err)
		}
	}
	if _, err := Parse("c2hvcnQ="); !errors.Is(err, ErrKey) || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Errorf("a short key: %v (the error must not quote it)", err)
	}
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw")
	if err := os.WriteFile(raw, root, 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := ReadFile(raw); err != nil || !bytes.Equal(k, root) {
		t.Errorf("raw key file: %x, %v", k, err)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte(hex.EncodeToString(root)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(open); !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key file others read: %v", err)
	}
}
