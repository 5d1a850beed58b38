// The configuration: one struct of groups (store, write, read, hedge,
// gc, sidecar) whose defaults suit a stage of a query written to and read
// from S3 over a link of tens of milliseconds per request (see
// docs/design.md), loaded from a flat YAML file and DURASHUFFLE_*
// environment variables, and validated with errors that name the key, the
// allowed range and the value.

package durashuffle

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration that reads "100ms", "6h" in YAML and env.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalText implements encoding.TextUnmarshaler: a Go duration
// such as 100ms, 30s or 6h.
func (d *Duration) UnmarshalText(b []byte) error {
	x, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("duration %q: want a Go duration such as 100ms, 30s or 6h", b)
	}
	*d = Duration(x)
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Config is every setting durashuffle has, in groups by what each
// configures; a key that two parts of the code read is in the group it
// is set for.
//
// Each field of a group is one key, and the configuration file stays
// flat: the yaml tag is the key at the top level of the file, every
// group being inlined ("chunk_size: 16MiB", never a "write:" section), so
// that one file serves every command, whatever the groups. The
// environment variable is DURASHUFFLE_ and the key in upper case
// (DURASHUFFLE_CHUNK_SIZE). The doc tag is what docs/configuration.md
// says of the key, cost included; the command line makes a flag of each
// key, the key with dashes (--chunk-size).
type Config struct {
	Store   StoreConfig   `yaml:",inline"`
	Write   WriteConfig   `yaml:",inline"`
	Read    ReadConfig    `yaml:",inline"`
	Hedge   HedgeConfig   `yaml:",inline"`
	GC      GCConfig      `yaml:",inline"`
	Sidecar SidecarConfig `yaml:",inline"`
}

// StoreConfig is Config.Store: the object store. Where stages live, how to reach and
// trust the endpoint, what every object put carries, whether commits
// are guarded, and how each request is retried and timed out.
type StoreConfig struct {
	Type                  string   `yaml:"store" doc:"The object store: s3 (Amazon S3 and what speaks its API: MinIO, LocalStack), azure (Azure Blob Storage) or gcs (Google Cloud Storage). bucket names the S3 bucket, the Azure container or the GCS bucket. The library opens S3 itself; azure and gcs are opened by the command line, or by a program with store/azstore or store/gcsstore and WithStore, so that a program on S3 downloads neither cloud's SDK."`
	AzureAccount          string   `yaml:"azure_account" doc:"Azure storage account (store azure). Credentials: AZURE_STORAGE_CONNECTION_STRING, else AZURE_STORAGE_KEY (the account's shared key), else Azure's default credential chain. endpoint overrides https://{account}.blob.core.windows.net (Azurite: http://127.0.0.1:10000/devstoreaccount1)."`
	GCSProject            string   `yaml:"gcs_project" doc:"Google Cloud project (store gcs) in which create-bucket makes the bucket; reads and writes need none. Credentials: Google's application default credentials; an endpoint (fake-gcs-server) is used without any."`
	Bucket                string   `yaml:"bucket" doc:"Bucket that holds every query's stages (the container, with store azure)."`
	Prefix                string   `yaml:"prefix" doc:"Key prefix under the bucket; durashuffle touches nothing outside it."`
	Endpoint              string   `yaml:"endpoint" doc:"S3 endpoint URL, http:// or https:// with a host (MinIO, LocalStack: http://127.0.0.1:9000); empty follows the AWS chain (AWS_ENDPOINT_URL, profile). Anything else is a configuration error, as is an empty --endpoint."`
	Region                string   `yaml:"region" doc:"Region; empty follows the AWS chain, then us-east-1."`
	PathStyle             bool     `yaml:"path_style" doc:"Path-style addressing (bucket in the path), needed by MinIO and LocalStack."`
	InsecureSkipVerify    bool     `yaml:"insecure_skip_verify" doc:"Skip TLS certificate verification, for trials against a server with a throwaway certificate. Off unless set explicitly; ca_file is the way to trust a private CA."`
	CAFile                string   `yaml:"ca_file" doc:"PEM bundle of CA certificates trusted besides the system's roots (a private CA that signed the endpoint's certificate). Empty: the system's roots (and AWS_CA_BUNDLE)."`
	SSE                   string   `yaml:"sse" doc:"Server-side encryption of every object written: empty (bucket default), AES256 (SSE-S3) or aws:kms (SSE-KMS)."`
	SSEKMSKeyID           string   `yaml:"sse_kms_key_id" doc:"KMS key for sse aws:kms; empty uses the account's default key."`
	EncryptionKey         string   `yaml:"encryption_key" doc:"Client-side encryption: a root key (64 hex digits, or base64 of 32 bytes) from which each stage's AES-256-GCM key is derived (HKDF-SHA256 with the query and stage). Every frame, and every spilled byte, is then sealed before it leaves the process, and readers need the same key. Costs about 28 bytes and one AES-GCM pass per frame. Prefer DURASHUFFLE_ENCRYPTION_KEY or encryption_key_file to a file others read. Empty: frames are stored as they are (sse still applies). At most one of encryption_key, encryption_key_file and encryption_kms_key_id." secret:"true"`
	EncryptionKeyFile     string   `yaml:"encryption_key_file" doc:"File holding the root key of encryption_key (32 raw bytes, 64 hex digits or base64), readable by its owner alone (a file others may read is refused). Read once at open."`
	EncryptionKMSKeyID    string   `yaml:"encryption_kms_key_id" doc:"KMS key (ID, ARN or alias) that wraps each query's data key: the first writer of a query makes one with GenerateDataKey and stores it wrapped beside the query ({query}/key.json, a conditional create, so racing writers agree on one key); every process unwraps it once per query (Decrypt) and keeps it, so KMS calls grow with processes and queries, not with objects or readers. KMS calls are retried by the AWS SDK's standard retryer (3 attempts, throttling included), their one retry layer; a KMS still throttling or down fails the writer or reader with an error naming the query, the stage and the call, before anything is written. Credentials follow the AWS chain, the region is region's."`
	EncryptionKMSEndpoint string   `yaml:"encryption_kms_endpoint" doc:"KMS endpoint URL for encryption_kms_key_id (a local KMS for tests); empty follows the AWS chain."`
	CommitGuard           string   `yaml:"commit_guard" doc:"on: before a client's first commit, check once that the store refuses a second PutObject with If-None-Match: * (two puts and a delete of a probe key under the prefix); where it does not, every commit fails and nothing is committed. off: skip the check, only for a store you vouch for: on a store that ignores the condition two attempts of a worker can both commit."`
	RetryMaxAttempts      int      `yaml:"retry_max_attempts" doc:"Attempts per request, the first included, on retryable errors (5xx, SlowDown, resets, timeouts)."`
	RetryBaseDelay        Duration `yaml:"retry_base_delay" doc:"First backoff; it doubles per attempt with full jitter, capped at retry_max_delay."`
	RetryMaxDelay         Duration `yaml:"retry_max_delay" doc:"Longest single backoff."`
	RequestTimeout        Duration `yaml:"request_timeout" doc:"Deadline of one request attempt; a stalled request is cut and retried. 0 means none."`
	ConnectTimeout        Duration `yaml:"connect_timeout" doc:"Longest wait to connect to the endpoint: the TCP connect, then the TLS handshake, each. An endpoint that drops packets fails a request after retry_max_attempts connects and their backoffs, 51.3s with the defaults (8 x 5s + at most 11.3s of backoff), with an error naming the endpoint and this key. Shorter fails a dead endpoint sooner; too short fails on a slow network path."`
	FirstByteTimeout      Duration `yaml:"first_byte_timeout" doc:"Longest wait for the first byte of a response, counted from when the request, body included, has been sent (a large part on a slow link has all the time it needs); and longest a request body may go without the endpoint taking one byte, or a response body without bringing one. A server that accepts connections and never answers fails a request after retry_max_attempts of these and their backoffs, 2m51.3s with the defaults. When it fires the pooled connections are dropped, so a peer that vanishes mid-run costs one such wait and then connect_timeout per attempt, 1m6.3s with the defaults. Too short cuts a slow server's answers (a gateway assembling a large multipart upload)."`
}

// WriteConfig is Config.Write: the write path, from Writer.Write to the uploaded parts:
// chunks and their uploads, objects, frames, encoders, spilled runs, a
// failed writer's cleanup, and the memory limit of a process that writes.
type WriteConfig struct {
	ChunkSize         Size        `yaml:"chunk_size" doc:"Bytes per multipart part. Each buffered chunk costs this much memory; larger chunks mean fewer requests. 5MiB to 5GiB (at most 4000MiB with store azure, whose part is one Put Block)."`
	UploadConcurrency int         `yaml:"upload_concurrency" doc:"Parts in flight across the process. The link limit is this times the per-connection bandwidth."`
	MaxBufferedChunks int         `yaml:"max_buffered_chunks" doc:"Chunks held in memory, queued or in flight: the memory bound (this x chunk_size). 0 means 2 x upload_concurrency."`
	MaxPartSize       Size        `yaml:"max_part_size" doc:"Largest part of a spilled writer's object (spill on, output past coalesce_budget). Such an object is uploaded from disk at Commit (the frames taken as they are from the runs' spill file, the frames merged at Commit from a file of the object's own in spill_dir) in about as many parts as it has connections to itself: upload_concurrency alone, upload_concurrency / N when N objects of the process upload from disk at once (at least one, then one part of up to this), at least 5MiB each, cut for the connections to end together. Each part is read from disk by every request, so a part costs no memory: far fewer requests than one per chunk_size. Every request, a retry's too, sends its part whole within request_timeout: 2GiB in 5m needs 6.8MiB/s per connection; lower it on a slower link. At most 5GiB (4000MiB with store azure); an object of more than this x 10,000 bytes is refused, naming the object, its size and the limit."`
	MaxObjectSize     Size        `yaml:"max_object_size" doc:"Roll over to a new data object past this size. 0 means only the 10,000-part limit."`
	KeySpread         int         `yaml:"key_spread" doc:"Spread data objects over this many key prefixes ({prefix}/~{shard}/{query}/...), so that a stage's PUTs and GETs meet S3's per-prefix request rates that many times over. 0: every object under its stage's prefix. Costs delete-query one LIST per shard prefix; readers and gc need no setting."`
	FrameTargetBytes  Size        `yaml:"frame_target_bytes" doc:"The size of a frame: a partition's rows in a sorted run are cut into frames of about this many logical bytes (a run's last rows of a partition, under a quarter of it, join its last frame: up to 1.25 times this). Smaller frames mean more index entries and more, smaller reads; larger ones more memory per frame decoded."`
	CoalesceBudget    Size        `yaml:"coalesce_budget" doc:"Memory per writer for rows not yet encoded, per-partition state and index entries included; when it fills, every partition is flushed in partition order as one sorted run. Larger means fewer runs (fewer GETs per partition range, larger frames at many partitions) and a later first upload. The index entries also cap a writer's input at many partitions: about coalesce_budget squared / (130 x partitions), 4 GiB at 8,192 partitions and the default (operations.md)."`
	Spill             string      `yaml:"spill" doc:"on: a writer's object holds ONE partition-sorted run, whatever its output size: runs flushed when coalesce_budget fills wait in a file under spill_dir, and at Commit the object is written in partition order, each partition's pieces merged into frames near frame_target_bytes; a reader of a partition range then makes one GET per writer object per group of partitions of up to 3/4 of its read window (read_ahead x read_range_bytes), however many runs the writer flushed. A writer whose output fits coalesce_budget touches no disk. Its upload starts at Commit. off: each run goes to the object as it flushes, and every run costs each reader one more GET per writer (operations.md)."`
	SpillDir          string      `yaml:"spill_dir" doc:"Directory for spilled runs (spill on). Each process works in a locked directory of its own under it, removed at exit; the next process to use spill_dir removes one left by a killed process. Empty: the system's temporary directory ($TMPDIR, else /tmp)."`
	SpillBytes        Size        `yaml:"spill_bytes" doc:"Most bytes this process's writers hold in spill_dir at once. A writer that would pass it fails naming the directory, the bytes and the limit, and commits nothing. Each spilled byte is written once and read once at Commit; at Commit the object is written to spill_dir too, and uploaded from there (max_part_size), while its runs are still there: a writer then holds about twice its spilled bytes. When spill_bytes has no room for the object, it is uploaded in chunks from memory instead. Combine tasks on disk count against it too: up to 16GiB each, and a process runs no more of them at once than it holds (two with the default)."`
	MemoryLimit       MemoryLimit `yaml:"memory_limit" doc:"Soft memory limit (Go's GOMEMLIMIT) that write, demo, serve and bench set for their process. auto: the memory bound (max_buffered_chunks x chunk_size + coalesce_budget per writer + 96 MiB; serve: per max_streams stream, see operations.md) less 52 MiB of resident memory the Go runtime does not govern, 236 MiB with the defaults and one writer; off: Go's default, the heap grows to twice what is live; or a size. A GOMEMLIMIT in the environment wins. Too low costs CPU: the collector runs whenever live memory nears it. The library never sets it."`
	EncodeConcurrency int         `yaml:"encode_concurrency" doc:"Goroutines encoding frames per writer. 0 means GOMAXPROCS."`
	Compression       string      `yaml:"compression" doc:"Compression of each frame's IPC messages, as one block: lz4, zstd, none, or auto: per frame, the cheapest of lz4 and zstd (fastest, then default level) at which the uploads rather than the encoders are the bottleneck, from the encoders' measured rate and the rate the upload pool takes bytes. It can only decide for frames encoded while chunks upload: with spill on, a writer's frames are encoded before its upload starts at Commit, and nearly all stay lz4 (spill off, or zstd, for a link-bound stage). Each frame's header names its codec; the worker manifest counts frames per codec."`
	Checksum          string      `yaml:"checksum" doc:"Per-part S3 checksum: crc32c (sent with every part and put, verified by the store) or none (uploads created without a checksum algorithm, parts sent whole rather than streamed over HTTPS). Frames always carry a CRC32C in the manifest, which readers check."`
	CleanupTimeout    Duration    `yaml:"cleanup_timeout" doc:"How long a failed or aborted writer spends aborting its multipart uploads, and then deleting its objects (each step), on a context detached from the caller's. What is not done by then is left to gc, and the error says so. Longer waits out a store that hangs; shorter fails faster."`
}

// ReadConfig is Config.Read: the ranged GETs of stored frames.
type ReadConfig struct {
	RangeBytes Size `yaml:"read_range_bytes" doc:"Largest range the reader buffers at once: neighbouring frames are read together in ranges of up to this size, each into a buffer of its size."`
	SpanBytes  Size `yaml:"read_span_bytes" doc:"Largest ranged GET of a partition read: an object's consecutive ranges are read through one GET of up to this size, range by range into read_ahead's buffers as they free, so it costs requests, not memory. Larger: fewer GETs (a TiB is 16,384 GETs at 64 MiB, 131,072 at 8 MiB), and an object's ranges move on one connection rather than read_ahead at once. read_range_bytes makes a GET per range, as reads in storage order and results pages always do (sizing.md#reads)."`
	Ahead      int  `yaml:"read_ahead" doc:"Ranged GETs in flight per reader. Reader memory is about read_ahead x read_range_bytes of stored bytes, plus at most as many logical bytes of frames decoded ahead of the consumer (an eighth of that while the consumer is slower than decoding), plus the batches it holds."`
	GapBytes   Size `yaml:"read_gap_bytes" doc:"Frames separated by at most this many bytes are fetched in one GET (the gap is read and dropped)."`
}

// HedgeConfig is Config.Hedge: hedged part uploads and range reads.
type HedgeConfig struct {
	Factor   float64  `yaml:"hedge_factor" doc:"A part upload or range read running longer than this times the recent p90 of its peers (each scaled to its size when it is larger: a 2 GiB part is late against the time its peers take per byte, not against theirs) is sent once more; first success wins. Parts are not hedged with sse aws:kms, nor on store gcs with checksum none: there two requests of a part may name it differently, and the one the store keeps cannot be told. 0 disables."`
	MinDelay Duration `yaml:"hedge_min_delay" doc:"Never hedge a request younger than this, so fast requests are never doubled."`
}

// GCConfig is Config.GC: what gc removes.
type GCConfig struct {
	ResultsRetention Duration `yaml:"results_retention" doc:"How long gc keeps results stages."`
}

// SidecarConfig is Config.Sidecar: the Arrow Flight sidecar (serve): its ports and their
// TLS, its token, its streams, and the memory store whose frames it
// serves to its peers (a Client honours memory_store_bytes and
// advertise_addr as well).
type SidecarConfig struct {
	Listen          string   `yaml:"listen" doc:"Sidecar Arrow Flight address: host:port (loopback by default) or unix:/path/to.sock."`
	MetricsListen   string   `yaml:"metrics_listen" doc:"Sidecar HTTP address for /metrics, /healthz and /readyz; empty disables it."`
	AuthToken       string   `yaml:"auth_token" doc:"Bearer token every Flight call must carry; empty allows any caller that can reach the socket." secret:"true"`
	MaxStreams      int      `yaml:"max_streams" doc:"Concurrent Flight streams (DoPut and DoGet) the sidecar serves; more wait."`
	MaxMessageBytes Size     `yaml:"max_message_bytes" doc:"Largest gRPC message the sidecar accepts or sends."`
	ShutdownGrace   Duration `yaml:"shutdown_grace" doc:"On SIGTERM, the longest the shutdown takes: streams in flight may finish in the grace less a cleanup reserve (a third of it, at most 2 x cleanup_timeout + 2s), then are cut off and their output aborted in the reserve."`
	TLSCertFile     string   `yaml:"tls_cert_file" doc:"PEM certificate (chain) of the sidecar; with tls_key_file it turns TLS on for both the Flight and the metrics port. Empty: plaintext, and a warning when either listens beyond loopback."`
	TLSKeyFile      string   `yaml:"tls_key_file" doc:"PEM private key of tls_cert_file. Read once at start; its contents are never logged. Keep the file readable by the sidecar alone."`
	TLSClientCAFile string   `yaml:"tls_client_ca_file" doc:"PEM CA certificates for mutual TLS: with it, both ports refuse a client without a certificate signed by one of them. Needs tls_cert_file."`
	// A stalled client must not hold a stream, or a slot, for ever.
	StreamFirstMessageTimeout Duration `yaml:"stream_first_message_timeout" doc:"How long a sidecar stream may take from its start to its first message (DoPut: its descriptor and schema, before it takes one of max_streams slots; DoGet: its ticket). Then it fails with DeadlineExceeded naming this key and commits nothing. 0 disables it."`
	StreamIdleTimeout         Duration `yaml:"stream_idle_timeout" doc:"How long a sidecar stream may wait on its client: a DoPut for its next message, a DoGet or DoAction for the client to read what was sent. Then it fails with DeadlineExceeded naming this key, a DoPut's output is aborted, and the slot is freed. Shorter frees slots held by stalled clients sooner; a client that is slower than this between batches must send metadata-only messages in between. 0 disables it."`
	MemoryStoreBytes          Size     `yaml:"memory_store_bytes" doc:"Memory that keeps committed workers' stored frames for fast reads (their uploaded chunk buffers, kept instead of released), by this process and, with advertise_addr, its peers. S3 stays the truth: anything may be evicted at any time and readers then fall back to S3. Part of the memory bound. 0 disables it; serve defaults to 1GiB, the library to 0."`
	AdvertiseAddr             string   `yaml:"advertise_addr" doc:"Flight address (host:port) under which peers reach this sidecar; written into the worker manifests it commits while their frames are held in memory, so readers elsewhere fetch them from here instead of S3. Empty: peers never ask this sidecar."`
}

// StoreConns is how many connections a store keeps to its endpoint:
// two per part in flight (one for a hedge), two per ranged GET of the
// sidecar's streams (read_ahead in flight and as many spans open
// between their ranges, read_span_bytes), and a few for metadata.
func (c Config) StoreConns() int {
	return 2*c.Write.UploadConcurrency + 2*c.Sidecar.MaxStreams*c.Read.Ahead + 16
}

// DefaultConfig returns the defaults: 8 MiB parts, 8 in flight and 16
// buffered (128 MiB of chunks), a 64 MiB coalesce budget per writer with
// spill on, LZ4 frames of about 1 MiB with CRC32C, reads of up to 8 MiB
// with 4 in flight, 8 attempts per request, and the sidecar on loopback.
// They bound a process's memory to a few hundred MiB while keeping S3's
// per-request latency off the throughput; docs/configuration.md lists
// each key with its default and its cost.
//
// The defaults of the keys a package below reads are that package's
// (chunker, uploader, reader, the S3 client), so that a program that builds that
// package's options with zero values gets the same.
func DefaultConfig() Config {
	var c Config
	c.Store.Type = "s3"
	c.Store.Prefix = "durashuffle"
	c.Store.CommitGuard = commitGuardOn
	c.Store.RetryMaxAttempts = 8
	c.Store.RetryBaseDelay = Duration(100 * time.Millisecond)
	c.Store.RetryMaxDelay = Duration(5 * time.Second)
	c.Store.RequestTimeout = Duration(5 * time.Minute)
	c.Store.ConnectTimeout = Duration(s3store.DefaultConnectTimeout)
	c.Store.FirstByteTimeout = Duration(s3store.DefaultFirstByteTimeout)

	c.Write.ChunkSize = 8 * MiB
	c.Write.UploadConcurrency = 8
	c.Write.MaxPartSize = uploader.DefaultMaxPartSize
	c.Write.FrameTargetBytes = chunker.DefaultFrameTargetBytes
	c.Write.CoalesceBudget = 64 * MiB
	c.Write.Spill = "on"
	c.Write.SpillBytes = 32 * GiB
	c.Write.MemoryLimit = MemoryLimitAuto
	c.Write.Compression = "lz4"
	c.Write.Checksum = "crc32c"
	c.Write.CleanupTimeout = Duration(uploader.DefaultCleanupTimeout)

	c.Read.RangeBytes = reader.DefaultRangeBytes
	c.Read.SpanBytes = reader.DefaultSpanBytes
	c.Read.Ahead = reader.DefaultReadAhead
	c.Read.GapBytes = reader.DefaultGapBytes

	c.Hedge.Factor = 4
	c.Hedge.MinDelay = Duration(2 * time.Second)

	c.GC.ResultsRetention = Duration(6 * time.Hour)

	c.Sidecar.Listen = "127.0.0.1:8815"
	c.Sidecar.MetricsListen = "127.0.0.1:9815"
	c.Sidecar.MaxStreams = 64
	c.Sidecar.MaxMessageBytes = 64 * MiB
	c.Sidecar.ShutdownGrace = Duration(30 * time.Second)
	c.Sidecar.StreamFirstMessageTimeout = Duration(time.Minute)
	c.Sidecar.StreamIdleTimeout = Duration(5 * time.Minute)
	return c
}

// maxKeySpread bounds key_spread: delete-query lists each shard prefix.
const maxKeySpread = 4096

// S3's part sizes bound chunk_size: while input flows, each chunk is a
// part (an object's tail is re-cut at Close, within the same limits).
const (
	minPartSize = Size(store.MinPartSize)
	maxPartSize = Size(store.MaxPartSize)
)

// azureMaxBlock is Azure's largest block: a part on Azure Blob Storage
// is one Put Block.
const azureMaxBlock = 4000 * MiB

// The values of commit_guard (off: see GuardOff).
const (
	commitGuardOn  = "on"
	commitGuardOff = "off"
)

// BufferedChunks is max_buffered_chunks with its default applied.
func (c Config) BufferedChunks() int {
	if c.Write.MaxBufferedChunks == 0 {
		return 2 * c.Write.UploadConcurrency
	}
	return c.Write.MaxBufferedChunks
}

// Encoders is encode_concurrency with its default applied.
func (c Config) Encoders() int {
	if c.Write.EncodeConcurrency == 0 {
		return runtime.GOMAXPROCS(0)
	}
	return c.Write.EncodeConcurrency
}

// Validate checks every key and returns all violations, each naming the
// key, the allowed range and the value.
func (c Config) Validate() error {
	var k checks
	c.Store.validate(&k)
	c.Write.validate(&k)
	if c.Store.Type == "azure" {
		for _, part := range []struct {
			key string
			v   Size
		}{{"chunk_size", c.Write.ChunkSize}, {"max_part_size", c.Write.MaxPartSize}} {
			if part.v > azureMaxBlock {
				k.bad(part.key, fmt.Sprintf("at most %v with store azure (a part is one Put Block)", azureMaxBlock), part.v)
			}
		}
	}
	c.Read.validate(&k)
	c.Hedge.validate(&k)
	if c.GC.ResultsRetention < 0 {
		k.bad("results_retention", "0 or positive", c.GC.ResultsRetention)
	}
	c.Sidecar.validate(&k)
	return errors.Join(k.errs...)
}

// checks collects a configuration's errors, each naming its key, the
// values it may take and the value it was given.
type checks struct{ errs []error }

func (k *checks) bad(key, want string, got any) {
	k.errs = append(k.errs, fmt.Errorf("%w: %s must be %s, got %v", ErrInvalidConfig, key, want, got))
}

func (k *checks) sizeIn(key string, v, lo, hi Size) {
	if v < lo || v > hi {
		k.bad(key, fmt.Sprintf("between %v and %v", lo, hi), v)
	}
}

func (k *checks) intIn(key string, v, lo, hi int) {
	if v < lo || v > hi {
		k.bad(key, fmt.Sprintf("between %d and %d", lo, hi), v)
	}
}

func (c StoreConfig) validate(k *checks) {
	switch c.Type {
	case "", "s3", "azure", "gcs": // empty: s3
	default:
		k.bad("store", "one of s3, azure, gcs", strconv.Quote(c.Type))
	}
	if c.Type != "azure" && c.AzureAccount != "" {
		k.bad("azure_account", "set only with store azure", "an account with store "+strconv.Quote(c.Type))
	}
	if c.Type != "gcs" && c.GCSProject != "" {
		k.bad("gcs_project", "set only with store gcs", "a project with store "+strconv.Quote(c.Type))
	}
	if c.Type == "azure" || c.Type == "gcs" {
		// S3's own keys say something S3 alone does: refused rather than
		// silently dropped on another store.
		for _, s3 := range []struct {
			key string
			set bool
		}{{"region", c.Region != ""}, {"path_style", c.PathStyle}, {"sse", c.SSE != ""}, {"sse_kms_key_id", c.SSEKMSKeyID != ""}} {
			if s3.set {
				k.bad(s3.key, "unset with store "+c.Type+" (an S3 setting)", "a value")
			}
		}
	}
	var sources []string
	for _, src := range []struct {
		name string
		set  bool
	}{{"encryption_key", c.EncryptionKey != ""}, {"encryption_key_file", c.EncryptionKeyFile != ""}, {"encryption_kms_key_id", c.EncryptionKMSKeyID != ""}} {
		if src.set {
			sources = append(sources, src.name)
		}
	}
	if len(sources) > 1 {
		k.bad(sources[1], "set alone: the stage key comes from one source", "it with "+sources[0])
	}
	if c.EncryptionKMSEndpoint != "" && c.EncryptionKMSKeyID == "" {
		k.bad("encryption_kms_endpoint", "set only with encryption_kms_key_id", strconv.Quote(c.EncryptionKMSEndpoint))
	}
	switch c.SSE {
	case "", "AES256", "aws:kms":
	default:
		k.bad("sse", "empty, AES256 or aws:kms", strconv.Quote(c.SSE))
	}
	if c.SSEKMSKeyID != "" && c.SSE != "aws:kms" {
		k.bad("sse_kms_key_id", "set only with sse aws:kms", "a key with sse "+strconv.Quote(c.SSE))
	}
	k.intIn("retry_max_attempts", c.RetryMaxAttempts, 1, 100)
	if c.RetryBaseDelay < 0 || c.RetryBaseDelay.D() > time.Minute {
		k.bad("retry_base_delay", "between 0s and 1m0s", c.RetryBaseDelay)
	}
	if c.RetryMaxDelay < c.RetryBaseDelay || c.RetryMaxDelay.D() > 10*time.Minute {
		k.bad("retry_max_delay", fmt.Sprintf("between retry_base_delay (%v) and 10m0s", c.RetryBaseDelay), c.RetryMaxDelay)
	}
	if c.RequestTimeout < 0 {
		k.bad("request_timeout", "0 (none) or positive", c.RequestTimeout)
	}
	if c.ConnectTimeout.D() < 100*time.Millisecond || c.ConnectTimeout.D() > 5*time.Minute {
		k.bad("connect_timeout", "between 100ms and 5m0s", c.ConnectTimeout)
	}
	if c.FirstByteTimeout.D() < time.Second || c.FirstByteTimeout.D() > time.Hour {
		k.bad("first_byte_timeout", "between 1s and 1h0m0s", c.FirstByteTimeout)
	}
	if c.Endpoint != "" && !validEndpoint(c.Endpoint) {
		k.bad("endpoint", "empty (the AWS chain) or an http:// or https:// URL with a host, such as http://127.0.0.1:9000", strconv.Quote(c.Endpoint))
	}
	switch c.CommitGuard {
	case commitGuardOn, commitGuardOff:
	default:
		k.bad("commit_guard", "on or off", strconv.Quote(c.CommitGuard))
	}
	if strings.HasPrefix(c.Prefix, "/") || strings.Contains(c.Prefix, "..") {
		k.bad("prefix", "a relative key prefix without '..'", strconv.Quote(c.Prefix))
	}
}

func (c WriteConfig) validate(k *checks) {
	k.sizeIn("chunk_size", c.ChunkSize, minPartSize, maxPartSize)
	k.intIn("upload_concurrency", c.UploadConcurrency, 1, 1024)
	k.sizeIn("max_part_size", c.MaxPartSize, minPartSize, maxPartSize)
	if c.MaxBufferedChunks != 0 {
		k.intIn("max_buffered_chunks", c.MaxBufferedChunks, 1, 65536)
	}
	if c.KeySpread != 0 && (c.KeySpread < 2 || c.KeySpread > maxKeySpread) {
		k.bad("key_spread", fmt.Sprintf("0 (off) or 2 to %d", maxKeySpread), c.KeySpread)
	}
	if c.MaxObjectSize != 0 && c.MaxObjectSize < c.ChunkSize {
		k.bad("max_object_size", fmt.Sprintf("0 or at least chunk_size (%v)", c.ChunkSize), c.MaxObjectSize)
	}
	k.sizeIn("frame_target_bytes", c.FrameTargetBytes, 4*KiB, 1*GiB)
	if c.CoalesceBudget < c.FrameTargetBytes {
		k.bad("coalesce_budget", fmt.Sprintf("at least frame_target_bytes (%v)", c.FrameTargetBytes), c.CoalesceBudget)
	}
	switch c.Spill {
	case "on", "off":
	default:
		k.bad("spill", "on or off", strconv.Quote(c.Spill))
	}
	if c.SpillBytes < 1 {
		k.bad("spill_bytes", "at least 1", c.SpillBytes)
	}
	if c.MemoryLimit > 0 && Size(c.MemoryLimit) < minMemoryLimit {
		k.bad("memory_limit", fmt.Sprintf("auto, off or at least %v", minMemoryLimit), c.MemoryLimit)
	}
	k.intIn("encode_concurrency", c.EncodeConcurrency, 0, 1024)
	switch c.Compression {
	case "lz4", "zstd", "none", "auto":
	default:
		k.bad("compression", "one of lz4, zstd, none, auto", strconv.Quote(c.Compression))
	}
	switch c.Checksum {
	case "crc32c", "none":
	default:
		k.bad("checksum", "one of crc32c, none", strconv.Quote(c.Checksum))
	}
	if c.CleanupTimeout.D() < time.Second || c.CleanupTimeout.D() > time.Hour {
		k.bad("cleanup_timeout", "between 1s and 1h0m0s", c.CleanupTimeout)
	}
}

func (c ReadConfig) validate(k *checks) {
	k.sizeIn("read_range_bytes", c.RangeBytes, 64*KiB, 5*GiB)
	k.sizeIn("read_span_bytes", c.SpanBytes, c.RangeBytes, 5*GiB)
	k.intIn("read_ahead", c.Ahead, 1, 256)
	k.sizeIn("read_gap_bytes", c.GapBytes, 0, c.RangeBytes)
}

func (c HedgeConfig) validate(k *checks) {
	if c.Factor != 0 && (c.Factor < 1.5 || c.Factor > 100) {
		k.bad("hedge_factor", "0 (off) or between 1.5 and 100", c.Factor)
	}
	if c.MinDelay < 0 {
		k.bad("hedge_min_delay", "0 or positive", c.MinDelay)
	}
}

func (c SidecarConfig) validate(k *checks) {
	k.intIn("max_streams", c.MaxStreams, 1, 100000)
	k.sizeIn("max_message_bytes", c.MaxMessageBytes, 1*MiB, 2*GiB-1)
	if c.ShutdownGrace < 0 {
		k.bad("shutdown_grace", "0 or positive", c.ShutdownGrace)
	}
	for _, d := range []struct {
		key string
		v   Duration
	}{{"stream_first_message_timeout", c.StreamFirstMessageTimeout}, {"stream_idle_timeout", c.StreamIdleTimeout}} {
		if d.v != 0 && (d.v.D() < 10*time.Millisecond || d.v.D() > 24*time.Hour) {
			k.bad(d.key, "0 (off) or between 10ms and 24h0m0s", d.v)
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		k.bad("tls_cert_file and tls_key_file", "both set or both empty",
			fmt.Sprintf("tls_cert_file %q and tls_key_file %q", c.TLSCertFile, c.TLSKeyFile))
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		k.bad("tls_client_ca_file", "set only with tls_cert_file and tls_key_file (mutual TLS needs TLS)", strconv.Quote(c.TLSClientCAFile))
	}
	if c.MemoryStoreBytes < 0 {
		k.bad("memory_store_bytes", "0 (off) or a size", c.MemoryStoreBytes)
	}
	if c.AdvertiseAddr != "" {
		if _, port, err := net.SplitHostPort(c.AdvertiseAddr); err != nil || port == "" || port == "0" {
			k.bad("advertise_addr", "empty or host:port with a fixed port", strconv.Quote(c.AdvertiseAddr))
		}
	}
}

// validEndpoint: an absolute http or https URL with a host (and a port
// in range, if any), no credentials, query or fragment. The SDK would
// only find out at the first request.
func validEndpoint(s string) bool {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return false
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	return true
}

// configKey is one key of the file and the environment: its name and
// where its field is in Config (the index path for
// reflect.Value.FieldByIndex: the group, then the field).
type configKey struct {
	name  string
	index []int
	field reflect.StructField
}

// configKeys lists every key in struct order: each group's fields, each
// named by its yaml tag. The flat file and the environment are read
// through it.
func configKeys() []configKey {
	t := reflect.TypeFor[Config]()
	var ks []configKey
	for i := range t.NumField() {
		g := t.Field(i)
		for j := range g.Type.NumField() {
			f := g.Type.Field(j)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			ks = append(ks, configKey{name: name, index: []int{i, j}, field: f})
		}
	}
	return ks
}

// setText parses s into the field of c that k names, as the environment
// gives it: sizes, durations and memory limits through their
// UnmarshalText, numbers and booleans in Go syntax.
func (c *Config) setText(k configKey, s string) error {
	v := reflect.ValueOf(c).Elem().FieldByIndex(k.index)
	switch p := v.Addr().Interface().(type) {
	case encoding.TextUnmarshaler:
		return p.UnmarshalText([]byte(s))
	case *string:
		*p = s
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		*p = n
	case *float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", s)
		}
		*p = f
	case *bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		*p = b
	default:
		return fmt.Errorf("unsupported type %T", p)
	}
	return nil
}

// LoadFile overlays the YAML file at path on c. The file is flat, one
// key per line at the top level whatever its group ("chunk_size: 16MiB",
// "listen: 127.0.0.1:8815"); unknown keys, and sections, are errors
// naming them.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: read config file: %v", ErrInvalidConfig, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: config file %s: %v", ErrInvalidConfig, path, err)
	}
	return nil
}

// LoadEnv overlays DURASHUFFLE_* variables from getenv on c: for each
// key, DURASHUFFLE_ and the key in upper case (DURASHUFFLE_CHUNK_SIZE).
// An empty variable is not set.
func (c *Config) LoadEnv(getenv func(string) string) error {
	for _, k := range configKeys() {
		env := "DURASHUFFLE_" + strings.ToUpper(k.name)
		if s := getenv(env); s != "" {
			if err := c.setText(k, s); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrInvalidConfig, env, err)
			}
		}
	}
	return nil
}
