package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/store"
)

// Scenario names.
const (
	ScenarioWrite        = "write"
	ScenarioRead         = "read"
	ScenarioSmallBatches = "small-batches"
	ScenarioEncode       = "encode"
	ScenarioMemory       = "memory"
	ScenarioSweep        = "sweep"
	ScenarioPartitions   = "partitions"
)

// Scenarios lists every scenario in the order `bench all` runs them.
var Scenarios = []string{ScenarioWrite, ScenarioRead, ScenarioSmallBatches, ScenarioEncode, ScenarioMemory, ScenarioSweep, ScenarioPartitions, ScenarioFastpath, ScenarioFan}

// Options configure a benchmark run.
type Options struct {
	Config        durashuffle.Config // endpoint, bucket, chunk size, concurrency, ...
	Latency       time.Duration
	ConnBandwidth int64 // bytes per second per connection; 0 with Latency 0: no shaping
	Rounds        int
	Stored        int64 // stored bytes of the data set (write, read, sweep)
	Data          Data  // partitions, producers, workers, write rows, input, seed
	Readers       int   // partitions read at once
	SmallRows     []int // small-batches: rows per Write, small first
	SmallOverLink bool  // small-batches over the link instead of the null store
	// WriteContenders: write runs only these (names as in its report);
	// empty: all of them.
	WriteContenders []string
	Writers         []int // encode: writer goroutine counts
	MemLogical      []int64
	ChunkSizes      []durashuffle.Size
	Concurrencies   []int
	// PartitionCounts and PartitionWriters are bench partitions' grid;
	// RangeReaders the readers that read each stage back, each a
	// contiguous range of partitions. Its targets compare WidePartitions
	// (2048) with the smallest count.
	PartitionCounts  []int
	PartitionWriters []int
	RangeReaders     int
	WidePartitions   int
	// FanShapes (writers x readers), FanMultiples (each writer's logical
	// output in coalesce budgets), FanPartitions and FanCoalesceBudget
	// (the coalesce_budget of every contender of the scenario; 0 keeps
	// Config's) are bench fan's.
	FanShapes         []FanShape
	FanMultiples      []int
	FanPartitions     int
	FanCoalesceBudget durashuffle.Size
	Runner            *Runner
	Log               io.Writer // progress lines; nil: none
	// MemoryLimits: the memory scenario runs every size once per value,
	// as the writer's memory_limit; empty means Config.Write.MemoryLimit alone
	// (the product as configured).
	MemoryLimits []durashuffle.MemoryLimit
	// Server is the in-process endpoint when Config.Store.Endpoint is empty:
	// ServerMemory (default) or ServerEmbedded.
	Server string
	// TLS makes the in-process endpoint serve HTTPS with a certificate
	// made for the run (its CA goes to every contender as
	// Config.Store.CAFile), so everything on the link is TLS, as with S3.
	TLS bool
	// Faults, if set, puts the fault proxy between the link and the
	// endpoint: every contender's requests meet the same faults.
	Faults *faultproxy.Spec
}

// In-process endpoints.
const (
	ServerMemory   = "memory"
	ServerEmbedded = "embedded"
)

// Env is what a run shares: the endpoint and the link in front of it.
type Env struct {
	o        *Options
	Link     *Link
	Endpoint string
	Bucket   string
	Embedded bool
	direct   store.Store
	// serverTLS is the in-process S3 endpoint's TLS (nil: plain HTTP).
	serverTLS *tls.Config
	workDir   string
	server    string
	stop      []func()
	run       string
}

// Start brings up the endpoint (the embedded server unless
// Config.Store.Endpoint is set) and the shaped link in front of it.
func Start(ctx context.Context, o *Options) (*Env, error) {
	e := &Env{o: o, Bucket: o.Config.Store.Bucket, Endpoint: o.Config.Store.Endpoint, run: time.Now().UTC().Format("20060102T150405")}
	if e.Bucket == "" {
		e.Bucket = "durashuffle-bench"
	}
	dir, err := os.MkdirTemp("", "durashuffle-bench-")
	if err != nil {
		return nil, err
	}
	e.workDir = dir
	e.stop = append(e.stop, func() { os.RemoveAll(dir) })
	if StoreKind(o.Config) != KindS3 {
		err = e.startCloud(ctx)
	} else {
		err = e.startS3(ctx, dir)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	if err := e.startLink(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// startCloud opens Azure Blob Storage or Google Cloud Storage, as the
// configuration names it (an emulator at its endpoint, or the service),
// and makes the container or bucket if it is missing.
func (e *Env) startCloud(ctx context.Context) error {
	o := e.o
	if o.Config.Store.Endpoint == "" && o.Server != "" && o.Server != ServerMemory {
		return fmt.Errorf("--server %s serves S3 only; store %s runs on its endpoint or its service", o.Server, StoreKind(o.Config))
	}
	url, err := serviceURL(o.Config)
	if err != nil {
		return err
	}
	st, err := openKind(ctx, o.Config, "", e.Bucket, false, nil, &store.Counter{})
	if err != nil {
		return err
	}
	if bm, ok := st.(store.BucketMaker); ok {
		if err := bm.EnsureBucket(ctx); err != nil {
			return fmt.Errorf("bucket %s: %w", e.Bucket, err)
		}
	}
	e.direct, e.Endpoint, e.server = st, url, storeLabel(o.Config, url)
	// The in-process endpoint's certificate is S3's alone.
	o.TLS = false
	return nil
}

// startS3 brings up the in-process S3 endpoint unless one is configured,
// and opens the store the parent cleans up with.
func (e *Env) startS3(ctx context.Context, dir string) error {
	o := e.o
	var err error
	var serverTLS *tls.Config
	if o.TLS && e.Endpoint == "" {
		if o.Server == ServerEmbedded {
			return fmt.Errorf("--tls needs --server memory: the embedded server speaks plain HTTP (use --tls=false)")
		}
		if serverTLS, o.Config.Store.CAFile, err = benchTLS(dir); err != nil {
			return fmt.Errorf("bench certificate: %w", err)
		}
	}
	e.serverTLS = serverTLS
	if e.Endpoint == "" {
		switch o.Server {
		case ServerEmbedded:
			// The keys the bench's children and stores sign with.
			srv, err := embedded.StartWith(embedded.Options{DataDir: filepath.Join(dir, "s3"), Buckets: []string{e.Bucket},
				AccessKeyID: "durashuffle", SecretAccessKey: "durashuffle"})
			if err != nil {
				return err
			}
			e.stop = append(e.stop, func() { srv.Close() })
			e.Endpoint, e.server = srv.Endpoint(), "embedded S3 server (gofakes3, in the parent process)"
		case ServerMemory, "":
			srv, err := StartMemServerTLS(serverTLS, e.Bucket)
			if err != nil {
				return err
			}
			e.stop = append(e.stop, func() { srv.Close() })
			e.Endpoint, e.server = srv.Endpoint(), "in-memory S3 endpoint (in the parent process)"
			if serverTLS != nil {
				e.server = "in-memory S3 endpoint over HTTPS (in the parent process)"
			}
		default:
			return fmt.Errorf("server %q: want memory or embedded", o.Server)
		}
		e.Embedded = true
		o.Config.Store.PathStyle = true
	}
	s3, err := openKind(ctx, o.Config, e.Endpoint, e.Bucket, e.Embedded, nil, &store.Counter{})
	if err != nil {
		return err
	}
	if !e.Embedded {
		if err := s3.(store.BucketMaker).EnsureBucket(ctx); err != nil {
			return fmt.Errorf("bucket %s: %w", e.Bucket, err)
		}
	}
	e.direct = s3
	return nil
}

// startLink puts the fault proxy (if asked for) and the shaped link in
// front of the endpoint.
func (e *Env) startLink() error {
	o := e.o
	var err error
	serverTLS := e.serverTLS
	upstream := e.Endpoint
	if o.Faults != nil {
		var upstreamTLS *tls.Config
		if serverTLS != nil {
			if upstreamTLS, err = clientTLS(o.Config.Store.CAFile, false); err != nil {
				return err
			}
		}
		fp, err := faultproxy.StartTLS(origin(e.Endpoint), *o.Faults, serverTLS, upstreamTLS)
		if err != nil {
			return fmt.Errorf("fault proxy: %w", err)
		}
		e.stop = append(e.stop, func() {
			e.logf("faults injected: %s", fp.Stats())
			fp.Close()
		})
		upstream = fp.URL()
	}
	if e.Link, err = StartLink(upstream, o.Latency, o.ConnBandwidth); err != nil {
		return err
	}
	e.stop = append(e.stop, e.Link.Close)
	return nil
}

// origin is endpoint less its path (Azure's names the account): what a
// proxy in front of it forwards to, every request keeping its own path.
func origin(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return endpoint
	}
	return u.Scheme + "://" + u.Host
}

// Close stops the link and the server and removes temporary files.
func (e *Env) Close() {
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
	e.stop = nil
}

func (e *Env) logf(format string, args ...any) {
	if e.o.Log != nil {
		fmt.Fprintf(e.o.Log, format+"\n", args...)
	}
}

// Report is one scenario's outcome, as `--json` prints it.
type Report struct {
	Scenario string `json:"scenario"`
	// StoreKind is the kind of store measured: s3, azure or gcs.
	StoreKind string   `json:"store_kind,omitempty"`
	Link      LinkInfo `json:"link"`
	Results   []Result `json:"results"`
	Targets   []Target `json:"targets,omitempty"`
	// Setup says what was measured: data set, configuration, store.
	Setup          Setup  `json:"setup"`
	Recommendation string `json:"recommendation,omitempty"`
	// Partitions is bench partitions' table, a write and a read per row
	// (Results is empty).
	Partitions []PartitionsRow `json:"partitions,omitempty"`
	// Fastpath is bench fastpath's table, one row per memory store mode
	// (Results is empty).
	Fastpath []FastpathRow `json:"fastpath,omitempty"`
	// Fan is bench fan's table, one row per cell and contender (Results
	// is empty).
	Fan []FanRow `json:"fan,omitempty"`
}

// Setup is the fixed part of a scenario.
type Setup struct {
	Rounds            int     `json:"rounds"`
	Rows              int64   `json:"rows"`
	Partitions        int     `json:"partitions"`
	WriteRows         int     `json:"write_rows"`
	Producers         int     `json:"producers"`
	Workers           int     `json:"workers"`
	Input             string  `json:"input"`
	ChunkSize         int64   `json:"chunk_size"`
	UploadConcurrency int     `json:"upload_concurrency"`
	MaxBufferedChunks int     `json:"max_buffered_chunks"`
	CoalesceBudget    int64   `json:"coalesce_budget"`
	FrameTargetBytes  int64   `json:"frame_target_bytes"`
	Compression       string  `json:"compression"`
	Store             string  `json:"store"`
	CPUs              int     `json:"cpus"`
	StoredPerLogical  float64 `json:"stored_per_logical"`
	Readers           int     `json:"readers,omitempty"`
	ReadAhead         int     `json:"read_ahead,omitempty"`
	ReadRangeBytes    int64   `json:"read_range_bytes,omitempty"`
}

// Target is one performance target checked against the medians.
type Target struct {
	Name string  `json:"name"`
	Want string  `json:"want"`
	Got  float64 `json:"got"`
	Min  float64 `json:"min,omitempty"`
	Max  float64 `json:"max,omitempty"`
	OK   bool    `json:"ok"`
}

func atLeast(name string, got, min float64) Target {
	return Target{Name: name, Want: fmt.Sprintf(">= %.2f", min), Got: round3(got), Min: min, OK: got >= min}
}

func atMost(name string, got, max float64) Target {
	return Target{Name: name, Want: fmt.Sprintf("<= %.2f", max), Got: round3(got), Max: max, OK: got <= max}
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// Run runs one scenario.
func (e *Env) Run(ctx context.Context, scenario string) (*Report, error) {
	rep, err := e.runScenario(ctx, scenario)
	if rep != nil {
		rep.StoreKind = StoreKind(e.o.Config)
	}
	return rep, err
}

// s3Only are the scenarios whose baselines are S3's alone (the
// transfer managers, Druid's and Spark's layouts on S3) or that measure
// S3's in-memory endpoint.
var s3Only = []string{ScenarioPartitions, ScenarioFastpath, ScenarioFan}

func (e *Env) runScenario(ctx context.Context, scenario string) (*Report, error) {
	if kind := StoreKind(e.o.Config); kind != KindS3 && slices.Contains(s3Only, scenario) {
		return nil, fmt.Errorf("scenario %s runs on S3 only, not on store %s (write, read, small-batches, encode, memory and sweep run on every store)", scenario, kind)
	}
	switch scenario {
	case ScenarioWrite:
		return e.runWrite(ctx)
	case ScenarioRead:
		return e.runRead(ctx)
	case ScenarioSmallBatches:
		return e.runSmallBatches(ctx)
	case ScenarioEncode:
		return e.runEncode(ctx)
	case ScenarioMemory:
		return e.runMemory(ctx)
	case ScenarioSweep:
		return e.runSweep(ctx)
	case ScenarioPartitions:
		return e.runPartitions(ctx)
	case ScenarioFastpath:
		return e.runFastpath(ctx)
	case ScenarioFan:
		return e.runFan(ctx)
	}
	return nil, fmt.Errorf("unknown scenario %q: want one of %s", scenario, strings.Join(Scenarios, ", "))
}

// storedPerLogical measures the compression of the data set: one frame
// of each of a few partitions' pool rows, encoded as the writer would.
func (e *Env) storedPerLogical() (float64, error) {
	cfg := e.o.Config
	b, err := demo.NewBatcher(demo.Generator{Seed: e.o.Data.Seed}, 1, nil)
	if err != nil {
		return 0, err
	}
	defer b.Release()
	rows := int64(float64(cfg.Write.FrameTargetBytes) / bytesPerRow)
	var logical, stored int64
	for i := range int64(4) {
		parts := b.Batch(demo.Range{Lo: i * rows, Hi: (i + 1) * rows}, nil)
		var buf bytes.Buffer
		for _, p := range parts {
			st, err := frame.Encode(&buf, demo.Schema(), []arrow.RecordBatch{p.Record}, cfg.Write.Compression, memory.DefaultAllocator)
			p.Record.Release()
			if err != nil {
				return 0, err
			}
			logical += st.Bytes
		}
		stored += int64(buf.Len())
	}
	return float64(stored) / float64(logical), nil
}

// rowsFor is the rows whose encoding is about stored bytes.
func (e *Env) rowsFor(stored int64, ratio float64) int64 {
	return int64(float64(stored) / ratio / bytesPerRow)
}

func (e *Env) setup(d Data, cfg durashuffle.Config, st string, ratio float64) Setup {
	return Setup{
		Rounds: e.o.Rounds, Rows: d.Rows, Partitions: d.Partitions, WriteRows: d.WriteRows,
		Producers: d.Producers, Workers: d.Workers, Input: d.Input,
		ChunkSize: int64(cfg.Write.ChunkSize), UploadConcurrency: cfg.Write.UploadConcurrency,
		MaxBufferedChunks: cfg.BufferedChunks(), CoalesceBudget: int64(cfg.Write.CoalesceBudget),
		FrameTargetBytes: int64(cfg.Write.FrameTargetBytes), Compression: cfg.Write.Compression,
		Store: st, CPUs: runtime.NumCPU(), StoredPerLogical: round3(ratio),
	}
}

func (e *Env) storeName() string {
	if e.server != "" {
		return e.server
	}
	return e.Endpoint
}

// job is a job on this env's endpoint and link.
func (e *Env) job(kind, name, query string, cfg durashuffle.Config, d Data) *Job {
	return &Job{Kind: kind, Name: name, Endpoint: e.Endpoint, Dial: e.Link.Addr, Bucket: e.Bucket,
		Embedded: e.Embedded, Config: cfg, Data: d, Query: query}
}

// staged makes j a job whose CPU the report divides by stage: its child
// profiles its clock into the run's work dir (or where the Runner keeps
// profiles), and the Runner reads the profile (see Result.CPUByStage).
func (e *Env) staged(j *Job) *Job {
	j.StageProfile = true
	j.CPUProfile = filepath.Join(e.workDir, j.Query+".cpu.pprof")
	return j
}

func (e *Env) query(parts ...string) string {
	return "bench-" + e.run + "-" + strings.Join(parts, "-")
}

// cleanup deletes everything under a query; a failure only logs.
func (e *Env) cleanup(ctx context.Context, query string) {
	if e.direct == nil {
		return
	}
	prefix := strings.Trim(e.o.Config.Store.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	objs, _, err := e.direct.List(ctx, prefix+query+"/", "")
	if err == nil && len(objs) > 0 {
		keys := make([]string, len(objs))
		for i, o := range objs {
			keys[i] = o.Key
		}
		err = e.direct.Delete(ctx, keys...)
	}
	if err != nil {
		e.logf("  cleanup of %s: %v", query, err)
	}
}

// rounds runs each contender's job once per round, rotating the order
// from round to round, and returns every contender's median.
func (e *Env) rounds(ctx context.Context, names []string, mk func(name string, round int) *Job, after func(name string, r *Result)) ([]Result, error) {
	all := make(map[string][]*Result)
	rounds := max(1, e.o.Rounds)
	for round := range rounds {
		for k := range names {
			name := names[(k+round)%len(names)]
			j := mk(name, round)
			j.Round = &Round{Name: name, Round: round + 1, Rounds: rounds, Run: round*len(names) + k + 1, Runs: rounds * len(names)}
			r, err := e.o.Runner.Run(ctx, j)
			if j.Kind == "write" && !j.NullStore {
				e.cleanup(ctx, j.Query)
			}
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, name, err)
			}
			r.Name = name
			if after != nil {
				after(name, r)
			}
			e.logf("  round %d %-18s %7.2f s  %8.1f MiB/s stored  %8.1f MiB/s logical  rss %6.1f MiB  cpu %.1f s",
				round+1, name, r.Seconds, r.StoredBytesPerS/(1<<20), r.LogicalBytesPerS/(1<<20), float64(r.PeakRSSBytes)/(1<<20), r.CPUSeconds)
			all[name] = append(all[name], r)
		}
	}
	out := make([]Result, 0, len(names))
	for _, name := range names {
		out = append(out, median(all[name]))
	}
	return out, nil
}

// median is the round with the median time, with the median peak RSS and
// every round's time.
func median(rs []*Result) Result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b *Result) int { return cmpFloat(a.Seconds, b.Seconds) })
	m := *s[len(s)/2]
	if len(s)%2 == 0 {
		lo := s[len(s)/2-1]
		m.Seconds = (lo.Seconds + m.Seconds) / 2
		if m.Seconds > 0 {
			m.StoredBytesPerS = float64(m.StoredBytes) / m.Seconds
			m.LogicalBytesPerS = float64(m.LogicalBytes) / m.Seconds
		}
	}
	rss := make([]int64, len(rs))
	for i, r := range rs {
		rss[i] = r.PeakRSSBytes
		m.Rounds = append(m.Rounds, round3(r.Seconds))
	}
	slices.Sort(rss)
	m.PeakRSSBytes = rss[len(rss)/2]
	m.Keys = nil
	return m
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func find(rs []Result, name string) *Result {
	for i := range rs {
		if rs[i].Name == name {
			return &rs[i]
		}
	}
	return &Result{}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
