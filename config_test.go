package durashuffle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
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
		{"chunk too small", func(c *Config) { c.Write.ChunkSize = MiB }, "chunk_size must be between 5MiB and 5GiB, got 1MiB"},
		{"chunk too large", func(c *Config) { c.Write.ChunkSize = 6 * GiB }, "chunk_size must be between 5MiB and 5GiB, got 6GiB"},
		{"zero concurrency", func(c *Config) { c.Write.UploadConcurrency = 0 }, "upload_concurrency must be between 1 and 1024, got 0"},
		{"negative buffered", func(c *Config) { c.Write.MaxBufferedChunks = -1 }, "max_buffered_chunks must be between 1 and 65536, got -1"},
		{"budget below frame", func(c *Config) { c.Write.CoalesceBudget = 512 * KiB }, "coalesce_budget must be at least frame_target_bytes (1MiB), got 512KiB"},
		{"compression", func(c *Config) { c.Write.Compression = "gzip" }, `compression must be one of lz4, zstd, none, auto, got "gzip"`},
		{"checksum", func(c *Config) { c.Write.Checksum = "md5" }, `checksum must be one of crc32c, none, got "md5"`},
		{"read ahead", func(c *Config) { c.Read.Ahead = 0 }, "read_ahead must be between 1 and 256, got 0"},
		{"retries", func(c *Config) { c.Store.RetryMaxAttempts = 0 }, "retry_max_attempts must be between 1 and 100, got 0"},
		{"object below chunk", func(c *Config) { c.Write.MaxObjectSize = 6 * MiB }, "max_object_size must be 0 or at least chunk_size (8MiB), got 6MiB"},
		{"commit guard", func(c *Config) { c.Store.CommitGuard = "false" }, `commit_guard must be on or off, got "false"`},
		{"commit guard empty", func(c *Config) { c.Store.CommitGuard = "" }, `commit_guard must be on or off, got ""`},
		{"tls key without cert", func(c *Config) { c.Sidecar.TLSKeyFile = "k.pem" }, `tls_cert_file and tls_key_file must be both set or both empty, got tls_cert_file "" and tls_key_file "k.pem"`},
		{"client ca without tls", func(c *Config) { c.Sidecar.TLSClientCAFile = "ca.pem" }, `tls_client_ca_file must be set only with tls_cert_file and tls_key_file (mutual TLS needs TLS), got "ca.pem"`},
		{"advertise without port", func(c *Config) { c.Sidecar.AdvertiseAddr = "10.0.0.5" }, `advertise_addr must be empty or host:port with a fixed port, got "10.0.0.5"`},
		{"advertise port 0", func(c *Config) { c.Sidecar.AdvertiseAddr = "10.0.0.5:0" }, `advertise_addr must be empty or host:port with a fixed port, got "10.0.0.5:0"`},
		{"prefix escapes", func(c *Config) { c.Store.Prefix = "../x" }, `prefix must be a relative key prefix without '..', got "../x"`},
		{"store", func(c *Config) { c.Store.Type = "swift" }, `store must be one of s3, azure, gcs, got "swift"`},
		{"azure account on s3", func(c *Config) { c.Store.AzureAccount = "acct" }, `azure_account must be set only with store azure, got an account with store "s3"`},
		{"gcs project on azure", func(c *Config) { c.Store.Type, c.Store.GCSProject = "azure", "p" }, `gcs_project must be set only with store gcs, got a project with store "azure"`},
		{"region on gcs", func(c *Config) { c.Store.Type, c.Store.Region = "gcs", "eu-west-1" }, `region must be unset with store gcs (an S3 setting), got a value`},
		{"sse on azure", func(c *Config) { c.Store.Type, c.Store.SSE = "azure", "AES256" }, `sse must be unset with store azure (an S3 setting), got a value`},
		{"part over azure's largest block", func(c *Config) { c.Store.Type, c.Write.MaxPartSize = "azure", 4*GiB }, `max_part_size must be at most 4000MiB with store azure (a part is one Put Block), got 4GiB`},
		{"chunk over azure's largest block", func(c *Config) { c.Store.Type, c.Write.ChunkSize = "azure", 4001*MiB }, `chunk_size must be at most 4000MiB with store azure (a part is one Put Block), got 4001MiB`},
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
	if DefaultConfig().Store.CommitGuard != commitGuardOn {
		t.Fatalf("default commit_guard %q, want on", DefaultConfig().Store.CommitGuard)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("commit_guard: off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if err := c.LoadFile(file); err != nil || c.Store.CommitGuard != commitGuardOff || c.Validate() != nil {
		t.Fatalf("commit_guard: off in YAML: %q, %v, %v", c.Store.CommitGuard, err, c.Validate())
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

// everyKey sets each key to a value other than its default, once as a
// flat config file gives it and once as the environment does, and says
// which field of the grouped Config it must land in.
var everyKey = []struct {
	key               string
	file, env         string
	get               func(c *Config) any
	wantFile, wantEnv any
}{
	{"store", "azure", "gcs", func(c *Config) any { return c.Store.Type }, "azure", "gcs"},
	{"azure_account", "acct-file", "acct-env", func(c *Config) any { return c.Store.AzureAccount }, "acct-file", "acct-env"},
	{"gcs_project", "proj-file", "proj-env", func(c *Config) any { return c.Store.GCSProject }, "proj-file", "proj-env"},
	{"bucket", "b-file", "b-env", func(c *Config) any { return c.Store.Bucket }, "b-file", "b-env"},
	{"prefix", "p/file", "p/env", func(c *Config) any { return c.Store.Prefix }, "p/file", "p/env"},
	{"endpoint", "http://127.0.0.1:9000", "https://s3.example.com", func(c *Config) any { return c.Store.Endpoint }, "http://127.0.0.1:9000", "https://s3.example.com"},
	{"region", "eu-west-1", "ap-south-1", func(c *Config) any { return c.Store.Region }, "eu-west-1", "ap-south-1"},
	{"path_style", "true", "1", func(c *Config) any { return c.Store.PathStyle }, true, true},
	{"insecure_skip_verify", "true", "true", func(c *Config) any { return c.Store.InsecureSkipVerify }, true, true},
	{"ca_file", "/etc/ca-file.pem", "/etc/ca-env.pem", func(c *Config) any { return c.Store.CAFile }, "/etc/ca-file.pem", "/etc/ca-env.pem"},
	{"sse", "aws:kms", "AES256", func(c *Config) any { return c.Store.SSE }, "aws:kms", "AES256"},
	{"sse_kms_key_id", "key-file", "key-env", func(c *Config) any { return c.Store.SSEKMSKeyID }, "key-file", "key-env"},
	{"encryption_key", "k-file", "k-env", func(c *Config) any { return c.Store.EncryptionKey }, "k-file", "k-env"},
	{"encryption_key_file", "/keys/file", "/keys/env", func(c *Config) any { return c.Store.EncryptionKeyFile }, "/keys/file", "/keys/env"},
	{"encryption_kms_key_id", "kms-file", "kms-env", func(c *Config) any { return c.Store.EncryptionKMSKeyID }, "kms-file", "kms-env"},
	{"encryption_kms_endpoint", "http://kms-file", "http://kms-env", func(c *Config) any { return c.Store.EncryptionKMSEndpoint }, "http://kms-file", "http://kms-env"},
	{"commit_guard", "off", "off", func(c *Config) any { return c.Store.CommitGuard }, "off", "off"},
	{"retry_max_attempts", "3", "5", func(c *Config) any { return c.Store.RetryMaxAttempts }, 3, 5},
	{"retry_base_delay", "50ms", "70ms", func(c *Config) any { return c.Store.RetryBaseDelay }, Duration(50 * time.Millisecond), Duration(70 * time.Millisecond)},
	{"retry_max_delay", "2s", "3s", func(c *Config) any { return c.Store.RetryMaxDelay }, Duration(2 * time.Second), Duration(3 * time.Second)},
	{"request_timeout", "1m", "2m", func(c *Config) any { return c.Store.RequestTimeout }, Duration(time.Minute), Duration(2 * time.Minute)},
	{"connect_timeout", "3s", "4s", func(c *Config) any { return c.Store.ConnectTimeout }, Duration(3 * time.Second), Duration(4 * time.Second)},
	{"first_byte_timeout", "11s", "12s", func(c *Config) any { return c.Store.FirstByteTimeout }, Duration(11 * time.Second), Duration(12 * time.Second)},

	{"chunk_size", "16MiB", "32MiB", func(c *Config) any { return c.Write.ChunkSize }, 16 * MiB, 32 * MiB},
	{"upload_concurrency", "3", "5", func(c *Config) any { return c.Write.UploadConcurrency }, 3, 5},
	{"max_buffered_chunks", "7", "9", func(c *Config) any { return c.Write.MaxBufferedChunks }, 7, 9},
	{"max_object_size", "1GiB", "2GiB", func(c *Config) any { return c.Write.MaxObjectSize }, GiB, 2 * GiB},
	{"max_part_size", "256MiB", "1GiB", func(c *Config) any { return c.Write.MaxPartSize }, 256 * MiB, GiB},
	{"key_spread", "16", "32", func(c *Config) any { return c.Write.KeySpread }, 16, 32},
	{"frame_target_bytes", "512KiB", "2MiB", func(c *Config) any { return c.Write.FrameTargetBytes }, 512 * KiB, 2 * MiB},
	{"coalesce_budget", "128MiB", "256MiB", func(c *Config) any { return c.Write.CoalesceBudget }, 128 * MiB, 256 * MiB},
	{"spill", "off", "off", func(c *Config) any { return c.Write.Spill }, "off", "off"},
	{"spill_dir", "/var/spill-file", "/var/spill-env", func(c *Config) any { return c.Write.SpillDir }, "/var/spill-file", "/var/spill-env"},
	{"spill_bytes", "1GiB", "2GiB", func(c *Config) any { return c.Write.SpillBytes }, GiB, 2 * GiB},
	{"memory_limit", "512MiB", "off", func(c *Config) any { return c.Write.MemoryLimit }, MemoryLimit(512 * MiB), MemoryLimitOff},
	{"encode_concurrency", "2", "6", func(c *Config) any { return c.Write.EncodeConcurrency }, 2, 6},
	{"compression", "zstd", "none", func(c *Config) any { return c.Write.Compression }, "zstd", "none"},
	{"checksum", "none", "none", func(c *Config) any { return c.Write.Checksum }, "none", "none"},
	{"cleanup_timeout", "7s", "9s", func(c *Config) any { return c.Write.CleanupTimeout }, Duration(7 * time.Second), Duration(9 * time.Second)},

	{"read_range_bytes", "4MiB", "16MiB", func(c *Config) any { return c.Read.RangeBytes }, 4 * MiB, 16 * MiB},
	{"read_span_bytes", "32MiB", "128MiB", func(c *Config) any { return c.Read.SpanBytes }, 32 * MiB, 128 * MiB},
	{"read_ahead", "7", "9", func(c *Config) any { return c.Read.Ahead }, 7, 9},
	{"read_gap_bytes", "64KiB", "128KiB", func(c *Config) any { return c.Read.GapBytes }, 64 * KiB, 128 * KiB},

	{"hedge_factor", "2.5", "0", func(c *Config) any { return c.Hedge.Factor }, 2.5, 0.0},
	{"hedge_min_delay", "3s", "4s", func(c *Config) any { return c.Hedge.MinDelay }, Duration(3 * time.Second), Duration(4 * time.Second)},

	{"results_retention", "3h", "12h", func(c *Config) any { return c.GC.ResultsRetention }, Duration(3 * time.Hour), Duration(12 * time.Hour)},

	{"listen", "127.0.0.1:1111", "unix:/run/d.sock", func(c *Config) any { return c.Sidecar.Listen }, "127.0.0.1:1111", "unix:/run/d.sock"},
	{"metrics_listen", "127.0.0.1:2222", "127.0.0.1:3333", func(c *Config) any { return c.Sidecar.MetricsListen }, "127.0.0.1:2222", "127.0.0.1:3333"},
	{"auth_token", "tok-file", "tok-env", func(c *Config) any { return c.Sidecar.AuthToken }, "tok-file", "tok-env"},
	{"max_streams", "5", "6", func(c *Config) any { return c.Sidecar.MaxStreams }, 5, 6},
	{"max_message_bytes", "8MiB", "16MiB", func(c *Config) any { return c.Sidecar.MaxMessageBytes }, 8 * MiB, 16 * MiB},
	{"shutdown_grace", "10s", "20s", func(c *Config) any { return c.Sidecar.ShutdownGrace }, Duration(10 * time.Second), Duration(20 * time.Second)},
	{"tls_cert_file", "/tls/c-file.pem", "/tls/c-env.pem", func(c *Config) any { return c.Sidecar.TLSCertFile }, "/tls/c-file.pem", "/tls/c-env.pem"},
	{"tls_key_file", "/tls/k-file.pem", "/tls/k-env.pem", func(c *Config) any { return c.Sidecar.TLSKeyFile }, "/tls/k-file.pem", "/tls/k-env.pem"},
	{"tls_client_ca_file", "/tls/ca-file.pem", "/tls/ca-env.pem", func(c *Config) any { return c.Sidecar.TLSClientCAFile }, "/tls/ca-file.pem", "/tls/ca-env.pem"},
	{"stream_first_message_timeout", "30s", "45s", func(c *Config) any { return c.Sidecar.StreamFirstMessageTimeout }, Duration(30 * time.Second), Duration(45 * time.Second)},
	{"stream_idle_timeout", "2m", "3m", func(c *Config) any { return c.Sidecar.StreamIdleTimeout }, Duration(2 * time.Minute), Duration(3 * time.Minute)},
	{"memory_store_bytes", "256MiB", "512MiB", func(c *Config) any { return c.Sidecar.MemoryStoreBytes }, 256 * MiB, 512 * MiB},
	{"advertise_addr", "10.0.0.5:8815", "10.0.0.6:8815", func(c *Config) any { return c.Sidecar.AdvertiseAddr }, "10.0.0.5:8815", "10.0.0.6:8815"},
}

// TestFlatFileAndEnvFillEveryGroup: a flat config file of the layout
// users have, every key at the top level, and the same keys as
// DURASHUFFLE_* variables, each land in their group's field; the table
// covers every key Config has.
func TestFlatFileAndEnvFillEveryGroup(t *testing.T) {
	listed := map[string]bool{}
	var yml strings.Builder
	env := map[string]string{}
	for _, k := range everyKey {
		if listed[k.key] {
			t.Fatalf("key %s twice in the table", k.key)
		}
		listed[k.key] = true
		fmt.Fprintf(&yml, "%s: %s\n", k.key, k.file)
		env["DURASHUFFLE_"+strings.ToUpper(k.key)] = k.env
	}
	for _, k := range configKeys() {
		if !listed[k.name] {
			t.Errorf("key %s (%s) is not in the table: add it", k.name, k.field.Name)
		}
	}
	if len(everyKey) != len(configKeys()) {
		t.Fatalf("the table has %d keys, Config %d", len(everyKey), len(configKeys()))
	}

	file := filepath.Join(t.TempDir(), "flat.yaml")
	if err := os.WriteFile(file, []byte(yml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	c := DefaultConfig()
	if err := c.LoadFile(file); err != nil {
		t.Fatal(err)
	}
	for _, k := range everyKey {
		if got := k.get(&c); got != k.wantFile {
			t.Errorf("file %s: %q: got %v (%T), want %v (%T)", k.key, k.file, got, got, k.wantFile, k.wantFile)
		}
		if k.get(&def) == k.wantFile {
			t.Errorf("file %s: %v is the default; pick another value", k.key, k.wantFile)
		}
	}

	// The environment over the file, as the command line applies them.
	if err := c.LoadEnv(func(name string) string { return env[name] }); err != nil {
		t.Fatal(err)
	}
	for _, k := range everyKey {
		if got := k.get(&c); got != k.wantEnv {
			t.Errorf("env DURASHUFFLE_%s=%q: got %v (%T), want %v (%T)", strings.ToUpper(k.key), k.env, got, got, k.wantEnv, k.wantEnv)
		}
	}
	// A quoted YAML value reads as the plain one does.
	c = DefaultConfig()
	if err := os.WriteFile(file, []byte("chunk_size: \"16MiB\"\ncommit_guard: \"off\"\nretry_base_delay: '50ms'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadFile(file); err != nil {
		t.Fatal(err)
	}
	if c.Write.ChunkSize != 16*MiB || c.Store.CommitGuard != "off" || c.Store.RetryBaseDelay.D() != 50*time.Millisecond {
		t.Fatalf("quoted values: chunk_size %v, commit_guard %q, retry_base_delay %v", c.Write.ChunkSize, c.Store.CommitGuard, c.Store.RetryBaseDelay)
	}
}

// TestLoadFileIsFlat: a file that nests a key under its group's name is
// refused naming the section, so that no one writes the layout the Go
// struct has and finds it ignored.
func TestLoadFileIsFlat(t *testing.T) {
	file := filepath.Join(t.TempDir(), "nested.yaml")
	if err := os.WriteFile(file, []byte("write:\n  chunk_size: 16MiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	err := c.LoadFile(file)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "field write not found") || !strings.Contains(err.Error(), file) {
		t.Fatalf("nested file: %v, want it refused naming write and the file", err)
	}
	if c.Write.ChunkSize != 8*MiB {
		t.Fatalf("chunk_size %v after a refused file", c.Write.ChunkSize)
	}
}

// TestConfigKeys: every field of every group is a key with a name, a
// doc, and a name no other field has; and no group holds anything but
// keys.
func TestConfigKeys(t *testing.T) {
	seen := map[string]string{}
	for _, k := range configKeys() {
		where := k.field.Name
		if k.name == "" || k.name == "-" {
			t.Errorf("field %s has no yaml key", where)
		}
		if k.field.Tag.Get("doc") == "" {
			t.Errorf("key %s (%s) has no doc tag", k.name, where)
		}
		if other, ok := seen[k.name]; ok {
			t.Errorf("key %s is both %s and %s", k.name, other, where)
		}
		seen[k.name] = where
		switch k.field.Type.Kind() {
		case reflect.String, reflect.Int, reflect.Int64, reflect.Float64, reflect.Bool:
		default:
			t.Errorf("key %s (%s) is a %v, which neither the environment nor a flag can set", k.name, where, k.field.Type)
		}
	}
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		if f := ct.Field(i); f.Tag.Get("yaml") != ",inline" || f.Type.Kind() != reflect.Struct {
			t.Errorf("Config.%s is not an inlined group (yaml %q): the file would need a section for it", f.Name, f.Tag.Get("yaml"))
		}
	}
}

// TestOpenCloudStoreNeedsItsPackage: the library links only the S3 SDK;
// store azure or gcs without a store handed in is refused, naming the
// package that opens it.
func TestOpenCloudStoreNeedsItsPackage(t *testing.T) {
	for _, kind := range []string{"azure", "gcs"} {
		cfg := DefaultConfig()
		cfg.Store.Type, cfg.Store.Bucket = kind, "c"
		c, err := Open(context.Background(), cfg)
		if err == nil {
			c.Close()
			t.Fatalf("Open with store %s and no store: no error", kind)
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "store "+kind+" is opened with its own package") {
			t.Fatalf("Open with store %s: %v, want ErrInvalidConfig naming its package", kind, err)
		}
	}
}

// TestPartHedge: parts are hedged with the configured factor, except
// where two requests of one part may name it differently (S3 with
// SSE-KMS, GCS without CRC32Cs).
func TestPartHedge(t *testing.T) {
	for _, c := range []struct {
		name string
		mut  func(*Config)
		want bool
	}{
		{"s3", func(*Config) {}, true},
		{"s3 sse-s3", func(c *Config) { c.Store.SSE = "AES256" }, true},
		{"s3 sse-kms", func(c *Config) { c.Store.SSE = "aws:kms" }, false},
		{"gcs crc32c", func(c *Config) { c.Store.Type = "gcs" }, true},
		{"gcs no checksum", func(c *Config) { c.Store.Type, c.Write.Checksum = "gcs", "none" }, false},
		{"azure no checksum", func(c *Config) { c.Store.Type, c.Write.Checksum = "azure", "none" }, true},
	} {
		cfg := DefaultConfig()
		c.mut(&cfg)
		if got := partHedge(cfg); (got == cfg.Hedge.Factor && got > 0) != c.want {
			t.Errorf("%s: part hedge factor %v (configured %v), want hedged %v", c.name, got, cfg.Hedge.Factor, c.want)
		}
	}
}
