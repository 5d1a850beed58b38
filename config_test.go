package durashuffle

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Size
		err  bool
	}{
		{"plain bytes", "1048576", MiB, false},
		{"mib", "5MiB", 5 * MiB, false},
		{"mib spaced lower", "5 mib", 5 * MiB, false},
		{"gib", "1GiB", GiB, false},
		{"kib", "512KiB", 512 * KiB, false},
		{"decimal mb", "100MB", 100_000_000, false},
		{"fraction", "1.5GiB", GiB + GiB/2, false},
		{"short unit", "8m", 8 * MiB, false},
		{"empty", "", 0, true},
		{"negative", "-5MiB", 0, true},
		{"garbage", "five", 0, true},
		{"overflow", "99999999TiB", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseSize(c.in)
			if (err != nil) != c.err {
				t.Fatalf("ParseSize(%q) error = %v, want error %v", c.in, err, c.err)
			}
			if got != c.want {
				t.Fatalf("ParseSize(%q) = %d, want %d", c.in, got, c.want)
			}
		})
	}
	if s := (8 * MiB).String(); s != "8MiB" {
		t.Fatalf("String = %q", s)
	}
}

func TestDefaultIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := DefaultConfig().BufferedChunks(); got != 16 {
		t.Fatalf("default max_buffered_chunks = %d, want 2 x 8", got)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*Config)
		want string // substring naming key, range and value
	}{
		{"chunk too small", func(c *Config) { c.ChunkSize = MiB }, "chunk_size must be between 5MiB and 5GiB, got 1MiB"},
		{"chunk too large", func(c *Config) { c.ChunkSize = 6 * GiB }, "chunk_size must be between 5MiB and 5GiB, got 6GiB"},
		{"zero concurrency", func(c *Config) { c.UploadConcurrency = 0 }, "upload_concurrency must be between 1 and 1024, got 0"},
		{"negative buffered", func(c *Config) { c.MaxBufferedChunks = -1 }, "max_buffered_chunks must be between 1 and 65536, got -1"},
		{"budget below frame", func(c *Config) { c.CoalesceBudget = 512 * KiB }, "coalesce_budget must be at least frame_target_bytes (1MiB), got 512KiB"},
		{"compression", func(c *Config) { c.Compression = "gzip" }, `compression must be one of lz4, zstd, none, auto, got "gzip"`},
		{"checksum", func(c *Config) { c.Checksum = "md5" }, `checksum must be one of crc32c, none, got "md5"`},
		{"read ahead", func(c *Config) { c.ReadAhead = 0 }, "read_ahead must be between 1 and 256, got 0"},
		{"retries", func(c *Config) { c.RetryMaxAttempts = 0 }, "retry_max_attempts must be between 1 and 100, got 0"},
		{"object below chunk", func(c *Config) { c.MaxObjectSize = 6 * MiB }, "max_object_size must be 0 or at least chunk_size (8MiB), got 6MiB"},
		{"commit guard", func(c *Config) { c.CommitGuard = "false" }, `commit_guard must be on or off, got "false"`},
		{"commit guard empty", func(c *Config) { c.CommitGuard = "" }, `commit_guard must be on or off, got ""`},
		{"tls key without cert", func(c *Config) { c.TLSKeyFile = "k.pem" }, `tls_cert_file and tls_key_file must be both set or both empty, got tls_cert_file "" and tls_key_file "k.pem"`},
		{"client ca without tls", func(c *Config) { c.TLSClientCAFile = "ca.pem" }, `tls_client_ca_file must be set only with tls_cert_file and tls_key_file (mutual TLS needs TLS), got "ca.pem"`},
		{"advertise without port", func(c *Config) { c.AdvertiseAddr = "10.0.0.5" }, `advertise_addr must be empty or host:port with a fixed port, got "10.0.0.5"`},
		{"advertise port 0", func(c *Config) { c.AdvertiseAddr = "10.0.0.5:0" }, `advertise_addr must be empty or host:port with a fixed port, got "10.0.0.5:0"`},
		{"prefix escapes", func(c *Config) { c.Prefix = "../x" }, `prefix must be a relative key prefix without '..', got "../x"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.mut(&cfg)
			err := cfg.Validate()
			if err == nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %q, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	os.WriteFile(file, []byte("chunk_sise: 16MiB\n"), 0o600)
	var c Config
	if err := c.LoadFile(file); err == nil || !strings.Contains(err.Error(), "chunk_sise") {
		t.Fatalf("unknown key: %v", err)
	}
	c = DefaultConfig()
	err := c.LoadEnv(func(k string) string {
		if k == "DURASHUFFLE_READ_AHEAD" {
			return "many"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "DURASHUFFLE_READ_AHEAD") {
		t.Fatalf("bad env: %v", err)
	}
}

// TestCommitGuardOff: the guard is on unless a file, the environment or a
// flag says off in so many words; YAML's unquoted off stays the word.
func TestCommitGuardOff(t *testing.T) {
	if DefaultConfig().CommitGuard != commitGuardOn {
		t.Fatalf("default commit_guard %q, want on", DefaultConfig().CommitGuard)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("commit_guard: off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if err := c.LoadFile(file); err != nil || c.CommitGuard != commitGuardOff || c.Validate() != nil {
		t.Fatalf("commit_guard: off in YAML: %q, %v, %v", c.CommitGuard, err, c.Validate())
	}
	c = DefaultConfig()
	if err := c.LoadEnv(func(k string) string {
		if k == "DURASHUFFLE_COMMIT_GUARD" {
			return "no"
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `commit_guard must be on or off, got "no"`) {
		t.Fatalf("DURASHUFFLE_COMMIT_GUARD=no: %v, want it refused", err)
	}
}
