package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/manifest"
)

// defaultDemoBucket is the bucket the demo uses when none is configured.
const defaultDemoBucket = "durashuffle"

type demoOptions struct {
	query      string
	rows       int64
	workers    int
	partitions int
	batchRows  int
	producers  int
	readers    int
	seed       uint64
	dataDir    string
	json       bool
	encrypt    bool
	prog       *progress // nil: no progress bars
}

// demoSummary is what `demo --json` prints.
type demoSummary struct {
	Query    string `json:"query"`
	Stage    int    `json:"stage"`
	Bucket   string `json:"bucket"`
	Endpoint string `json:"endpoint"`
	Embedded bool   `json:"embedded"`
	// Encrypted: every frame was sealed (encryption_key, its file, KMS,
	// or --encrypt's key of the run's own).
	Encrypted bool `json:"encrypted"`
	// CommitGuard is the commit guard's state when the write began:
	// enforced (the store refused a second If-None-Match: * put) or off.
	CommitGuard durashuffle.GuardState `json:"commit_guard"`

	Committed     bool             `json:"committed"`
	RowsWritten   int64            `json:"rows_written"`
	Workers       int              `json:"workers"`
	Partitions    int              `json:"partitions"`
	Objects       int              `json:"objects"`
	Parts         int              `json:"parts"`
	Frames        int              `json:"frames"`
	ChunkSize     int64            `json:"chunk_size"`
	BytesLogical  int64            `json:"bytes_logical"`
	BytesStored   int64            `json:"bytes_stored"`
	Compression   string           `json:"compression"`
	CompressRatio float64          `json:"compression_ratio"`
	WriteSeconds  float64          `json:"write_seconds"`
	WriteMiBps    float64          `json:"write_mib_per_s"`
	WriteStored   float64          `json:"write_stored_mib_per_s"`
	Requests      map[string]int64 `json:"requests"`
	// PutRequests is the write's PUT-class requests (store.PutRequests),
	// PutPerGiB their number per GiB stored.
	PutRequests   int64            `json:"put_requests"`
	PutPerGiB     float64          `json:"put_requests_per_gib"`
	Retries       map[string]int64 `json:"retries"`
	PartsResent   int64            `json:"parts_resent"`
	PartsHedged   int64            `json:"parts_hedged"`
	PartHedgesWon int64            `json:"part_hedges_won"`
	PeakBuffered  int64            `json:"peak_buffered_chunks"`
	MaxBuffered   int              `json:"max_buffered_chunks"`
	UploadConc    int              `json:"upload_concurrency"`

	Sealed       bool             `json:"sealed"`
	SealRequests map[string]int64 `json:"seal_requests"`

	RowsRead      int64            `json:"rows_read"`
	ReadsHedged   int64            `json:"reads_hedged"`
	ReadHedgesWon int64            `json:"read_hedges_won"`
	ReadSeconds   float64          `json:"read_seconds"`
	ReadMiBps     float64          `json:"read_mib_per_s"`
	ReadStored    float64          `json:"read_stored_mib_per_s"`
	ReadRequests  map[string]int64 `json:"read_requests"`
	ReadRanges    int64            `json:"read_ranges"` // ranged data GETs; the rest of read_requests is the manifest and one index GET per partition

	Verified           bool     `json:"verified"`
	PartitionsVerified int      `json:"partitions_verified"`
	Mismatches         []string `json:"mismatches,omitempty"`
	OpenUploads        int      `json:"open_uploads"`
}

func (a *app) demoCommand() *cobra.Command {
	o := &demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Write, seal, read back and verify a generated TPC-H lineitem data set",
		Long:  `demo writes a TPC-H lineitem-like stage 0 of --query, seals it, reads it back and verifies every row (exit 1 if not), on an in-process S3 unless --endpoint is set.`,
		Example: `  durashuffle demo --json --rows 200000 --workers 2 --partitions 16 --chunk-size 5MiB
  durashuffle demo --endpoint http://127.0.0.1:9000 --path-style --bucket demo   # MinIO, AWS_* credentials`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runDemo(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.query, "query", "q", "", "query ID to write (default: a fresh demo-<time>-<random> ID)")
	fs.Int64Var(&o.rows, "rows", 2_000_000, "rows to generate")
	fs.IntVar(&o.workers, "workers", 4, "concurrent writers, worker IDs 0..N-1")
	fs.IntVar(&o.partitions, "partitions", 64, "output partitions")
	fs.IntVar(&o.batchRows, "batch-rows", 8192, "input rows per batch; each batch is split across the partitions")
	fs.IntVar(&o.producers, "producers", 2, "goroutines per worker handing input batches to the writer")
	fs.IntVar(&o.readers, "read-partitions", 8, "partitions read back concurrently")
	fs.Uint64Var(&o.seed, "seed", 1, "generator seed: row i is a function of (seed, i)")
	fs.StringVar(&o.dataDir, "data-dir", "", "embedded server's data directory, kept afterwards (default: a temporary directory, removed)")
	fs.BoolVar(&o.json, "json", false, "print the summary as JSON")
	fs.BoolVar(&o.encrypt, "encrypt", false, "seal every frame (AES-256-GCM) under encryption_key, its file or KMS if set, else a random key held in memory")
	return cmd
}

func (o *demoOptions) validate() error {
	switch {
	case o.rows < 1:
		return usagef("--rows must be at least 1, got %d", o.rows)
	case o.workers < 1 || o.workers > 10_000:
		return usagef("--workers must be between 1 and 10000, got %d", o.workers)
	case o.partitions < 1 || o.partitions > durashuffle.MaxPartitions:
		return usagef("--partitions must be between 1 and %d, got %d", durashuffle.MaxPartitions, o.partitions)
	case o.batchRows < 1:
		return usagef("--batch-rows must be at least 1, got %d", o.batchRows)
	case o.producers < 1 || o.producers > 256:
		return usagef("--producers must be between 1 and 256, got %d", o.producers)
	case o.readers < 1 || o.readers > 1024:
		return usagef("--read-partitions must be between 1 and 1024, got %d", o.readers)
	}
	if o.query == "" {
		// A query of its own per run, sorting by start time.
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.query = "demo-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
	}
	return manifest.ValidateID("query", o.query)
}

func (a *app) runDemo(ctx context.Context, o *demoOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	cfg, err := a.config()
	if err != nil {
		return err
	}
	if cfg.Store.Bucket == "" {
		cfg.Store.Bucket = defaultDemoBucket
	}
	configured := cfg.Store.EncryptionKey != "" || cfg.Store.EncryptionKeyFile != "" || cfg.Store.EncryptionKMSKeyID != ""
	if o.encrypt && !configured {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		cfg.Store.EncryptionKey = hex.EncodeToString(key)
	}
	sum := &demoSummary{
		Encrypted: o.encrypt || configured,
		Query:     o.query, Bucket: cfg.Store.Bucket, Workers: o.workers, Partitions: o.partitions,
		ChunkSize: int64(cfg.Write.ChunkSize), Compression: cfg.Write.Compression,
		MaxBuffered: cfg.BufferedChunks(), UploadConc: cfg.Write.UploadConcurrency,
	}

	// The embedded server unless an endpoint is configured.
	sum.Embedded = cfg.Store.Endpoint == ""
	// Writers, then readers: never both at once, but the bound counts both.
	a.applyMemoryLimit(cfg, durashuffle.MemoryLoad{Writers: o.workers, Readers: o.readers}, sum.Embedded)
	o.prog = a.startProgress()
	defer o.prog.close()
	var emb *embeddedS3
	if sum.Embedded {
		emb = &embeddedS3{dataDir: o.dataDir}
	}
	client, closeClient, err := a.connect(ctx, &cfg, emb, o.prog.observer(int64(cfg.Write.ChunkSize)))
	if err != nil {
		return err
	}
	defer closeClient()
	sum.Endpoint = cfg.Store.Endpoint
	counter := client.Counter()
	// The commit guard's one probe, before the write phase: a store that
	// would not make manifests commit points fails the demo before any
	// upload, and the write's request counts are the write's own.
	// A probe without a verdict (no answer) does not stop the demo: the
	// writes' own requests say what the store answers, and every Commit
	// probes again.
	if err := client.CheckCommitGuard(ctx); errors.Is(err, durashuffle.ErrCommitGuard) {
		return fmt.Errorf("write %s stage 0: %w", o.query, err)
	} else if err != nil {
		a.log.Warn("commit guard probe failed; the commits probe again", "err", err)
	}
	sum.CommitGuard = client.CommitGuard().State
	o.prog.writingRows(client, o.rows)

	// Write.
	a.log.Info("writing", "query", o.query, "rows", o.rows, "workers", o.workers, "partitions", o.partitions,
		"chunk_size", cfg.Write.ChunkSize, "upload_concurrency", cfg.Write.UploadConcurrency)
	before := counter.Requests()
	start := time.Now()
	written, workers, err := writeDemo(ctx, client, o)
	sum.WriteSeconds = round(time.Since(start).Seconds())
	sum.Requests = reqs.Diff(counter.Requests(), before)
	if err != nil {
		return fmt.Errorf("write %s stage 0: %w", o.query, err)
	}
	sum.Committed = true
	for _, m := range workers {
		t := m.Sum()
		sum.RowsWritten += t.Rows
		sum.Objects += t.Objects
		sum.Parts += t.Parts
		sum.Frames += t.Frames
		sum.BytesLogical += t.BytesLogical
		sum.BytesStored += t.BytesStored
	}
	sum.CompressRatio = ratio(float64(sum.BytesLogical), float64(sum.BytesStored))
	sum.PutRequests = reqs.PutRequests(sum.Requests)
	sum.PutPerGiB = reqs.PerGiB(sum.PutRequests, sum.BytesStored)
	sum.WriteMiBps = perSecond(sum.BytesLogical, sum.WriteSeconds)
	sum.WriteStored = perSecond(sum.BytesStored, sum.WriteSeconds)
	sum.PeakBuffered = client.Stats().PeakBuffered
	sum.PartsResent = client.Stats().Resent
	sum.Retries = map[string]int64{}
	for k, v := range counter.Retries() {
		sum.Retries[k.Op+"/"+k.Reason] += v
	}

	// Seal.
	before = counter.Requests()
	if _, err := client.Seal(ctx, o.query, 0, o.workers); err != nil {
		return err
	}
	sum.Sealed = true
	sum.SealRequests = reqs.Diff(counter.Requests(), before)

	// Read back and verify.
	a.log.Info("reading back", "query", o.query, "partitions", o.partitions)
	before = counter.Requests()
	start = time.Now()
	o.prog.readingRows(client, o.rows, sum.BytesStored)
	read, ranges, err := readDemo(ctx, client, o)
	sum.ReadRanges = ranges
	sum.ReadSeconds = round(time.Since(start).Seconds())
	sum.ReadRequests = reqs.Diff(counter.Requests(), before)
	if err != nil {
		return fmt.Errorf("read %s stage 0: %w", o.query, err)
	}
	sum.ReadMiBps = perSecond(sum.BytesLogical, sum.ReadSeconds)
	st := client.Stats()
	sum.PartsHedged, sum.PartHedgesWon = st.Hedged, st.HedgesWon
	sum.ReadsHedged, sum.ReadHedgesWon = st.ReadsHedged, st.ReadHedgesWon
	sum.ReadStored = perSecond(sum.BytesStored, sum.ReadSeconds)
	for p := range o.partitions {
		sum.RowsRead += read[p].Rows
		if read[p] != written[p] {
			sum.Mismatches = append(sum.Mismatches, fmt.Sprintf(
				"partition %d: read %d rows with hash %016x, wrote %d rows with hash %016x",
				p, read[p].Rows, read[p].Sum, written[p].Rows, written[p].Sum))
		} else {
			sum.PartitionsVerified++
		}
	}
	sum.Verified = len(sum.Mismatches) == 0 && sum.RowsRead == sum.RowsWritten && sum.RowsWritten == o.rows

	// Nothing may be left half-uploaded (not part of either phase).
	ups, err := client.Store().ListUploads(ctx, client.Layout().QueryPrefix(o.query))
	if err != nil {
		return fmt.Errorf("list multipart uploads: %w", err)
	}
	sum.OpenUploads = len(ups)

	o.prog.done()
	if o.json {
		if err := printJSON(a.stdout, sum); err != nil {
			return err
		}
	} else {
		printDemo(a.stdout, sum)
	}
	if !sum.Verified {
		return fmt.Errorf("verification failed: %d of %d partitions differ, %d rows read of %d written",
			len(sum.Mismatches), o.partitions, sum.RowsRead, sum.RowsWritten)
	}
	return nil
}

// writeDemo runs the workers concurrently and returns the digest of what
// each partition received and the committed manifests. If one worker
// fails, the others are cancelled and every writer aborts.
func writeDemo(ctx context.Context, c *durashuffle.Client, o *demoOptions) ([]demo.Digest, []*manifest.Worker, error) {
	gen := demo.Generator{Seed: o.seed}
	ranges := demo.Ranges(o.rows, o.workers)
	digests := make([]demo.Digest, o.partitions)
	manifests := make([]*manifest.Worker, o.workers)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for w := range o.workers {
		g.Go(func() error {
			m, d, err := writeWorker(gctx, c, o, gen, strconv.Itoa(w), ranges[w])
			if err != nil {
				return fmt.Errorf("worker %d: %w", w, err)
			}
			manifests[w] = m
			mu.Lock()
			for p := range d {
				digests[p].Merge(d[p])
			}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return digests, manifests, nil
}

// writeWorker is one worker: o.producers goroutines take the worker's
// input batches in turn and hand each whole, with its rows' partitions,
// to the writer, which scatters it; then the worker commits.
func writeWorker(ctx context.Context, c *durashuffle.Client, o *demoOptions, gen demo.Generator, worker string, rows demo.Range) (*manifest.Worker, []demo.Digest, error) {
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{
		Query: o.query, Stage: 0, Worker: worker, Partitions: o.partitions, Schema: demo.Schema(),
	})
	if err != nil {
		return nil, nil, err
	}
	batches := demo.Chunks(rows, int64(o.batchRows))
	var next atomic.Int64
	digests := make([][]demo.Digest, o.producers)
	g, gctx := errgroup.WithContext(ctx)
	for i := range o.producers {
		digests[i] = make([]demo.Digest, o.partitions)
		g.Go(func() error {
			b, err := demo.NewBatcher(gen, o.partitions, nil)
			if err != nil {
				return err
			}
			defer b.Release()
			for {
				n := next.Add(1) - 1
				if n >= int64(len(batches)) {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return context.Cause(gctx)
				}
				rec, parts := b.Partitioned(batches[n], digests[i])
				err := w.WritePartitioned(rec, parts)
				rec.Release()
				if err != nil {
					return fmt.Errorf("write rows %d to %d: %w", batches[n].Lo, batches[n].Hi, err)
				}
				o.prog.wrote(batches[n].Hi - batches[n].Lo)
			}
		})
	}
	if err := g.Wait(); err != nil {
		if aerr := w.Abort(); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return nil, nil, err
	}
	m, err := w.Commit(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := make([]demo.Digest, o.partitions)
	for _, d := range digests {
		for p := range d {
			out[p].Merge(d[p])
		}
	}
	return m, out, nil
}

// readDemo opens the sealed stage (one GET) and reads every partition,
// o.readers at a time, recomputing each one's digest from the decoded
// Arrow values. It also returns the number of ranged GETs.
func readDemo(ctx context.Context, c *durashuffle.Client, o *demoOptions) ([]demo.Digest, int64, error) {
	st, err := c.OpenStage(ctx, o.query, 0)
	if err != nil {
		return nil, 0, err
	}
	var ranges atomic.Int64
	digests := make([]demo.Digest, o.partitions)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.readers)
	for p := range o.partitions {
		g.Go(func() error {
			rr, err := st.ReadPartitions(gctx, []int{p})
			if err != nil {
				return err
			}
			defer rr.Close()
			ranges.Add(int64(rr.Ranges()))
			for rr.Next() {
				o.prog.readRows(rr.RecordBatch().NumRows())
				if err := demo.Check(rr.RecordBatch(), p, o.partitions, &digests[p]); err != nil {
					return err
				}
			}
			if err := rr.Err(); err != nil {
				return fmt.Errorf("partition %d: %w", p, err)
			}
			return nil
		})
	}
	err = g.Wait()
	return digests, ranges.Load(), err
}

func printDemo(w io.Writer, s *demoSummary) {
	where := s.Endpoint
	if s.Embedded {
		where = "embedded S3 server " + where
	}
	fmt.Fprintf(w, "durashuffle demo: query %s stage %d, bucket %s on %s\n", s.Query, s.Stage, s.Bucket, where)
	fmt.Fprintf(w, "  write    %d rows by %d workers into %d partitions in %.2f s\n", s.RowsWritten, s.Workers, s.Partitions, s.WriteSeconds)
	fmt.Fprintf(w, "           %s logical -> %s stored (%s, ratio %.2f); %d frames%s\n",
		mib(s.BytesLogical), mib(s.BytesStored), s.Compression, s.CompressRatio, s.Frames, map[bool]string{true: ", sealed with AES-256-GCM"}[s.Encrypted])
	fmt.Fprintf(w, "           %d objects, %d parts of %s; peak %d of %d chunk buffers\n",
		s.Objects, s.Parts, mib(s.ChunkSize), s.PeakBuffered, s.MaxBuffered)
	fmt.Fprintf(w, "           %.1f MiB/s logical, %.1f MiB/s stored\n", s.WriteMiBps, s.WriteStored)
	fmt.Fprintf(w, "           requests: %s\n", formatOps(s.Requests))
	fmt.Fprintf(w, "           %d PUT-class requests, %.2f per GiB stored\n", s.PutRequests, s.PutPerGiB)
	fmt.Fprintf(w, "  seal     requests: %s\n", formatOps(s.SealRequests))
	fmt.Fprintf(w, "  read     %d rows of %d partitions in %.2f s: %.1f MiB/s logical, %.1f MiB/s stored\n",
		s.RowsRead, s.Partitions, s.ReadSeconds, s.ReadMiBps, s.ReadStored)
	fmt.Fprintf(w, "           requests: %s\n", formatOps(s.ReadRequests))
	if s.Verified {
		fmt.Fprintf(w, "  verified row counts and content hashes of all %d partitions; %d multipart uploads left open\n", s.Partitions, s.OpenUploads)
	} else {
		fmt.Fprintf(w, "  VERIFICATION FAILED (%d rows read, %d written):\n", s.RowsRead, s.RowsWritten)
		for _, m := range s.Mismatches {
			fmt.Fprintf(w, "    %s\n", m)
		}
	}
}

// formatOps prints per-operation counts sorted by operation.
func formatOps(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
