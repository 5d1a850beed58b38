//go:build bench

package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/cmd/durashuffle/internal/bench"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// combineBench is one shape of bench combine: a stage of W writers x P
// partitions read by P readers (one partition each) as written, then
// combined, then read again.
type combineBench struct {
	Shape       string             `json:"shape"`
	Writers     int                `json:"writers"`
	Partitions  int                `json:"partitions"`
	StoredBytes int64              `json:"stored_bytes"`
	Groups      int                `json:"groups"`
	Buckets     int                `json:"buckets"`
	Write       combineBenchStep   `json:"write"` // the writers and the seal
	Direct      combineBenchStep   `json:"direct"`
	Combine     combineBenchStep   `json:"combine"`
	Combined    combineBenchStep   `json:"combined"`
	Predicted   combine.Prediction `json:"predicted"`
	// Rows is what the readers read, and Identical says whether every
	// partition read back the same rows with the same content hash
	// (SHA-256 of every value, in order) from both levels.
	Rows      int64 `json:"rows"`
	Identical bool  `json:"identical"`
	// Overlap is the same stage written again with its combine tasks
	// running while the writers do (--overlap).
	Overlap *combineOverlap `json:"overlap,omitempty"`
}

// combineOverlap is a stage whose combine tasks start as groups of
// writers commit (combine.Options.Expected), against the stage read as
// written.
type combineOverlap struct {
	Groups  int `json:"groups"`
	Buckets int `json:"buckets"`
	// Map is the writers' time (the map stage, to the last commit) with
	// the tasks running beside them; MapAlone is the same without them
	// (Write less its seal).
	Map      float64 `json:"map_seconds"`
	MapAlone float64 `json:"map_alone_seconds"`
	// Stage is write, combine and read combined; Direct is write and
	// read as written (Write + Direct above).
	Stage  float64 `json:"stage_seconds"`
	Direct float64 `json:"direct_seconds"`
	// Combine is the tasks' and seals' requests (the tasks ran during
	// the map stage), Combined the readers'.
	Combine   combineBenchStep   `json:"combine"`
	Combined  combineBenchStep   `json:"combined"`
	Predicted combine.Prediction `json:"predicted"`
	// Identical: every partition read back the same rows with the same
	// content (an order-free digest: within a partition the combined
	// level holds the groups in commit order) as the stage as written.
	Identical bool `json:"identical"`
}

type combineBenchStep struct {
	Seconds float64 `json:"seconds"`
	GETs    int64   `json:"gets"`
	PUTs    int64   `json:"puts"` // PUT-class: PutObject, multipart calls, LIST
	// BytesIn and BytesOut are the bytes the HTTP client received and
	// sent (bodies), over the link.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Requests is every request by operation, the counted ones included.
	Requests map[string]int64 `json:"requests,omitempty"`
}

var combineBenchSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "blob", Type: arrow.BinaryTypes.Binary},
}, nil)

func (a *app) benchCombineCommand(o *benchOptions) *cobra.Command {
	var (
		shapes   string
		readers  int
		parallel int
		groups   int
		buckets  int
		memBytes = durashuffle.Size(combine.DefaultMemoryBytes)
		overlap  bool
	)
	cmd := &cobra.Command{
		Use:   "combine",
		Short: "Read a stage as written and combined: requests and time, over the shaped link",
		Long: `bench combine writes a stage of W writers x P partitions (--stored bytes of
random rows) to the in-process endpoint (--server: the memory endpoint over
HTTPS, as S3 is, by default; --tls=false for HTTP, --server embedded for
gofakes3 over HTTP) behind the shaped link (--latency,
--conn-bandwidth), reads it with P readers of one partition each
(--combine-readers at once), combines it (durashuffle combine, --groups and
--buckets or the plan's sizes) and reads it again. It reports the GETs,
PUTs, bytes and seconds of each step beside the plan's predictions, and
checks that every partition reads back the same rows and content hash
from both levels. With --endpoint (and --bucket, --path-style,
--region; credentials from the environment) it runs against that store
instead, behind the same link, under a fresh query ID.

With --overlap it then writes the stage again with its combine tasks
running while the writers do (a plan made before any writer commits,
groups formed in commit order from the manifests the writers' commits
return, each group's tasks started once its writers have committed) and reports the stage's time (write, combine,
read) against writing and reading it as written, the map stage's own
time with and without the tasks beside it, the GETs against reading as
written, the predictions, and whether every partition reads back the
same rows and content. The stage is then first written once untimed,
so that both timed writes run in a warm process.`,
		Example: `  durashuffle bench combine --combine-shapes 16x16,64x64 --stored 64MiB --latency 20ms`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out []combineBench
			for _, s := range strings.Split(shapes, ",") {
				ws, ps, ok := strings.Cut(strings.TrimSpace(s), "x")
				w, err1 := strconv.Atoi(ws)
				p, err2 := strconv.Atoi(ps)
				if !ok || err1 != nil || err2 != nil || w < 1 || p < 1 {
					return usagef("--combine-shapes: %q is not WxP (writers x partitions), e.g. 64x64", s)
				}
				stored := int64(o.stored)
				if stored <= 0 {
					stored = 64 << 20
				}
				cfg, err := a.config()
				if err != nil {
					return err
				}
				r, err := runCombineBench(cmd.Context(), o, cfg, w, p, stored, readers, parallel, combine.Options{Groups: groups, Buckets: buckets, MemoryBytes: int64(memBytes)}, overlap)
				if err != nil {
					return err
				}
				out = append(out, r)
				if !o.json {
					printCombineBench(a, r)
				}
			}
			if o.json {
				return printJSON(a.stdout, out)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&shapes, "combine-shapes", "16x16,64x64", "stages to measure, writers x partitions, comma-separated")
	fs.IntVar(&readers, "combine-readers", 16, "readers at once (each opens the stage and reads one partition)")
	fs.IntVar(&parallel, "combine-parallel", 4, "combine tasks at once")
	fs.IntVar(&groups, "groups", 0, "writer groups G (default: the plan's)")
	fs.IntVar(&buckets, "buckets", 0, "partition buckets J (default: the plan's)")
	fs.Var(sizeFlag(&memBytes), "combine-memory-bytes", "largest task held in memory; larger ones are laid out in spill_dir (default 512MiB)")
	fs.BoolVar(&overlap, "overlap", false, "also write the stage again with its combine tasks running while the writers do")
	return cmd
}

func runCombineBench(ctx context.Context, o *benchOptions, base durashuffle.Config, W, P int, stored int64, readers, parallel int, co combine.Options, overlap bool) (combineBench, error) {
	res := combineBench{Shape: fmt.Sprintf("%dx%d", W, P), Writers: W, Partitions: P}
	cfg := durashuffle.DefaultConfig()
	var opts []durashuffle.Option
	var clientTLS *tls.Config
	query := "bench"
	if base.Store.Endpoint != "" {
		cfg.Store = base.Store
		query = fmt.Sprintf("bench-combine-%016x", rand.Uint64())
	} else {
		srv, tlsCfg, err := startCombineServer(o)
		if err != nil {
			return res, err
		}
		defer srv.Close()
		clientTLS = tlsCfg
		cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = "bench", srv.Endpoint(), true
		opts = append(opts, durashuffle.WithCredentials(credentials.NewStaticCredentialsProvider("durashuffle", "durashuffle", "")))
	}
	link, err := bench.StartLink(cfg.Store.Endpoint, o.latency, int64(o.connBandwidth))
	if err != nil {
		return res, err
	}
	defer link.Close()
	hc, tr := bench.HTTPClient(link.Addr, 64, clientTLS)
	defer tr.CloseIdleConnections()
	bytes := &byteCounter{next: hc.Transport}
	hc.Transport = bytes
	counter := new(store.Counter)
	opts = append(opts, durashuffle.WithHTTPClient(hc), durashuffle.WithCounter(counter))
	c, err := durashuffle.Open(ctx, cfg, opts...)
	if err != nil {
		return res, err
	}
	defer c.Close()
	if base.Store.Endpoint != "" {
		if err := c.CreateBucket(ctx); err != nil {
			return res, err
		}
	}
	step := func(before map[string]int64, in, out int64, start time.Time) combineBenchStep {
		s := combineBenchCount(reqs.Diff(counter.Requests(), before), time.Since(start))
		s.BytesIn, s.BytesOut = bytes.in.Load()-in, bytes.out.Load()-out
		return s
	}
	mark := func() (map[string]int64, int64, int64, time.Time) {
		return counter.Requests(), bytes.in.Load(), bytes.out.Load(), time.Now()
	}

	// The stage: every writer writes rows of 1 KiB of random bytes into
	// every partition, stored/(W x P) bytes each.
	rows := max(1, int(stored/int64(W*P)/1024))
	// The commit guard's probe, once per client, is not the stage's: made
	// here, the first level's requests are the same in both runs, and
	// the overlapped run's combining is its requests less the first's.
	if err := c.CheckCommitGuard(ctx); err != nil {
		return res, err
	}
	if overlap {
		// The two timed writes are compared: the stage is written once,
		// untimed, before either, so that both find the link's
		// connections open and the process's heap grown.
		if err := combineBenchWrite(ctx, c, query+"-warmup", W, P, rows, nil); err != nil {
			return res, err
		}
	}
	b0, i0, o0, t0 := mark()
	if err := combineBenchWrite(ctx, c, query, W, P, rows, nil); err != nil {
		return res, err
	}
	mapAlone := round(time.Since(t0).Seconds())
	m, err := c.Seal(ctx, query, 0, W)
	if err != nil {
		return res, err
	}
	res.Write = step(b0, i0, o0, t0)
	res.StoredBytes = m.Totals.BytesStored

	b0, i0, o0, t0 = mark()
	direct, err := combineBenchRead(ctx, c, query, P, readers)
	if err != nil {
		return res, err
	}
	res.Direct = step(b0, i0, o0, t0)
	b0, i0, o0, t0 = mark()
	cs, err := c.Combine(ctx, query, 0, co)
	if err != nil {
		return res, err
	}
	if _, err := cs.RunAll(ctx, parallel); err != nil {
		return res, err
	}
	if _, err := cs.Seal(ctx); err != nil {
		return res, err
	}
	res.Combine = step(b0, i0, o0, t0)
	p := cs.Plan()
	res.Groups, res.Buckets, res.Predicted = len(p.Groups), len(p.Buckets), p.Predict
	b0, i0, o0, t0 = mark()
	combined, err := combineBenchRead(ctx, c, query, P, readers)
	if err != nil {
		return res, err
	}
	res.Combined = step(b0, i0, o0, t0)
	res.Identical = true
	for q := range P {
		res.Rows += direct[q].rows
		if direct[q] != combined[q] {
			res.Identical = false
		}
	}
	if res.Rows != int64(W*P*rows) {
		res.Identical = false
	}
	if !overlap {
		return res, nil
	}

	// The stage again, its tasks running beside the writers: a plan made
	// before any writer commits, each group's tasks started once its
	// writers have committed.
	ov := &combineOverlap{MapAlone: mapAlone, Direct: round(res.Write.Seconds + res.Direct.Seconds)}
	res.Overlap = ov
	oq := query + "-overlap"
	oo := co
	oo.Expected = combine.Expect(W, P, res.StoredBytes)
	oo.CommitsHanded = true
	b0, i0, o0, t0 = mark()
	cs, err = c.Combine(ctx, oq, 0, oo)
	if err != nil {
		return res, err
	}
	op := cs.Plan()
	ov.Groups, ov.Buckets, ov.Predicted = len(op.Groups), len(op.Buckets), op.Predict
	committed := make(chan *manifest.Worker, W)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tasks, tctx := errgroup.WithContext(bctx)
	tasks.SetLimit(max(1, parallel) + 1)
	tasks.Go(func() error {
		// Groups in order, each once its writers have committed: the
		// engine counts its writers' commits, so that it forms each group
		// (from the listing, in commit order) when it is ready.
		next, commits := 0, 0
		for next < len(op.Groups) {
			if commits < op.Groups[next].Hi {
				select {
				case m := <-committed:
					// The engine hands each commit's manifest over: its
					// group forms without reading it back.
					if err := cs.Committed(m); err != nil {
						return err
					}
					commits++
					continue
				case <-tctx.Done():
					return context.Cause(tctx)
				}
			}
			if _, err := cs.FormGroup(tctx, next, nil); err != nil {
				return err
			}
			for j := range op.Buckets {
				n := j*len(op.Groups) + next
				tasks.Go(func() error {
					_, err := cs.RunTask(tctx, n)
					return err
				})
			}
			next++
		}
		return nil
	})
	mapStart := time.Now()
	werr := combineBenchWrite(ctx, c, oq, W, P, rows, committed)
	ov.Map = round(time.Since(mapStart).Seconds())
	if werr != nil {
		return res, werr
	}
	if _, err := c.Seal(ctx, oq, 0, W); err != nil {
		return res, err
	}
	if err := tasks.Wait(); err != nil {
		return res, err
	}
	// The combined seal; the first level's requests (its writers' and
	// seal's) are taken out of combining's by counting them apart.
	if _, err := cs.Seal(ctx); err != nil {
		return res, err
	}
	all := step(b0, i0, o0, t0)
	ov.Combine = combineBenchStep{Seconds: all.Seconds, GETs: all.GETs - res.Write.GETs, PUTs: all.PUTs - res.Write.PUTs,
		BytesIn: all.BytesIn - res.Write.BytesIn, BytesOut: all.BytesOut - res.Write.BytesOut,
		Requests: reqs.Diff(all.Requests, res.Write.Requests)}
	b0, i0, o0, t1 := mark()
	ocombined, err := combineBenchRead(ctx, c, oq, P, readers)
	if err != nil {
		return res, err
	}
	ov.Combined = step(b0, i0, o0, t1)
	ov.Stage = round(time.Since(t0).Seconds())
	ov.Identical = true
	for q := range P {
		if direct[q].rows != ocombined[q].rows || direct[q].digest != ocombined[q].digest {
			ov.Identical = false
		}
	}
	return res, nil
}

// combineBenchWrite runs W writers of P partitions, 8 at a time, rows
// rows per partition each; each commit's manifest is sent on committed
// (when not nil).
func combineBenchWrite(ctx context.Context, c *durashuffle.Client, query string, W, P, rows int, committed chan<- *manifest.Worker) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for w := range W {
		g.Go(func() error {
			wr, err := c.NewWriter(gctx, durashuffle.WriterOptions{Query: query, Stage: 0, Worker: strconv.Itoa(w), Partitions: P})
			if err != nil {
				return err
			}
			for p := range P {
				rec := combineBenchBatch(int64((w*P+p)*rows), rows)
				err := wr.Write(p, rec)
				rec.Release()
				if err != nil {
					return err
				}
			}
			m, err := wr.Commit(gctx)
			if err == nil && committed != nil {
				committed <- m
			}
			return err
		})
	}
	return g.Wait()
}

// partitionRead is what a reader of one partition read: its rows, a
// SHA-256 of every value, in order, and an order-free digest (the sum,
// by 64-bit words, of each row's SHA-256).
type partitionRead struct {
	rows   int64
	hash   [32]byte
	digest [4]uint64
}

// byteCounter counts the bytes of request and response bodies.
type byteCounter struct {
	next    http.RoundTripper
	in, out atomic.Int64
}

func (b *byteCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ContentLength > 0 {
		b.out.Add(r.ContentLength)
	}
	resp, err := b.next.RoundTrip(r)
	if err == nil && resp.Body != nil {
		resp.Body = &countedBody{ReadCloser: resp.Body, n: &b.in}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countedBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// combineBenchRead runs P readers, readers at a time, each opening the
// stage and reading one partition whole; it returns what each read.
func combineBenchRead(ctx context.Context, c *durashuffle.Client, query string, P, readers int) ([]partitionRead, error) {
	out := make([]partitionRead, P)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, readers))
	for p := range P {
		g.Go(func() error {
			s, err := c.OpenStage(gctx, query, 0)
			if err != nil {
				return err
			}
			recs, err := s.ReadPartitions(gctx, []int{p})
			if err != nil {
				return err
			}
			defer recs.Close()
			h := sha256.New()
			var n int64
			for recs.Next() {
				rec := recs.RecordBatch()
				ids := rec.Column(0).(*array.Int64)
				blobs := rec.Column(1).(*array.Binary)
				for i := range int(rec.NumRows()) {
					id := binary.LittleEndian.AppendUint64(nil, uint64(ids.Value(i)))
					h.Write(id)
					h.Write(blobs.Value(i))
					row := sha256.Sum256(append(id, blobs.Value(i)...))
					for k := range out[p].digest {
						out[p].digest[k] += binary.LittleEndian.Uint64(row[8*k:])
					}
				}
				n += rec.NumRows()
			}
			out[p].rows = n
			copy(out[p].hash[:], h.Sum(nil))
			return recs.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func combineBenchCount(d map[string]int64, took time.Duration) combineBenchStep {
	return combineBenchStep{Seconds: round(took.Seconds()), GETs: d["GetObject"],
		PUTs:     d["PutObject"] + d["CreateMultipartUpload"] + d["UploadPart"] + d["CompleteMultipartUpload"] + d["ListObjectsV2"],
		Requests: d}
}

func combineBenchBatch(lo int64, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, combineBenchSchema)
	defer b.Release()
	buf := make([]byte, 1024)
	for i := lo; i < lo+int64(n); i++ {
		r := rand.New(rand.NewPCG(uint64(i), 5))
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.BinaryBuilder).Append(buf)
	}
	return b.NewRecordBatch()
}

func printCombineBench(a *app, r combineBench) {
	pr := r.Predicted
	fmt.Fprintf(a.stdout, "%s (%s stored), %d groups x %d buckets, %d rows, identical %v:\n", r.Shape, mib(r.StoredBytes), r.Groups, r.Buckets, r.Rows, r.Identical)
	fmt.Fprintf(a.stdout, "  write + seal     %7d GETs                      %5d PUTs                    %7.2f s  in %s out %s\n", r.Write.GETs, r.Write.PUTs, r.Write.Seconds, mib(r.Write.BytesIn), mib(r.Write.BytesOut))
	fmt.Fprintf(a.stdout, "  read as written  %7d GETs (predicted %7d)            %7.2f s  in %s out %s\n", r.Direct.GETs, pr.Direct.GET, r.Direct.Seconds, mib(r.Direct.BytesIn), mib(r.Direct.BytesOut))
	fmt.Fprintf(a.stdout, "  combine          %7d GETs (predicted %7d), %5d PUTs (predicted %5d)  %7.2f s  in %s out %s\n", r.Combine.GETs, pr.Combine.GET, r.Combine.PUTs, pr.Combine.PUT, r.Combine.Seconds, mib(r.Combine.BytesIn), mib(r.Combine.BytesOut))
	fmt.Fprintf(a.stdout, "  read combined    %7d GETs (predicted %7d)            %7.2f s  in %s out %s\n", r.Combined.GETs, pr.Combined.GET, r.Combined.Seconds, mib(r.Combined.BytesIn), mib(r.Combined.BytesOut))
	if ov := r.Overlap; ov != nil {
		op := ov.Predicted
		gets := ov.Combine.GETs + ov.Combined.GETs
		fmt.Fprintf(a.stdout, "  overlapped, %d groups x %d buckets, identical %v:\n", ov.Groups, ov.Buckets, ov.Identical)
		fmt.Fprintf(a.stdout, "    map stage      %7.2f s with the tasks beside it, %7.2f s alone\n", ov.Map, ov.MapAlone)
		fmt.Fprintf(a.stdout, "    combine        %7d GETs (predicted %7d), %5d PUTs (predicted %5d)\n", ov.Combine.GETs, op.Combine.GET, ov.Combine.PUTs, op.Combine.PUT)
		fmt.Fprintf(a.stdout, "    read combined  %7d GETs (predicted %7d)            %7.2f s\n", ov.Combined.GETs, op.Combined.GET, ov.Combined.Seconds)
		fmt.Fprintf(a.stdout, "    stage          %7.2f s combined against %7.2f s as written (%.2fx); GETs %d against %d (%.3fx; readers alone %.3fx)\n",
			ov.Stage, ov.Direct, ov.Stage/max(ov.Direct, 0.001), gets, r.Direct.GETs, float64(gets)/float64(max(r.Direct.GETs, 1)), float64(ov.Combined.GETs)/float64(max(r.Direct.GETs, 1)))
	}
}

// combineServer is the in-process endpoint of bench combine.
type combineServer interface {
	Endpoint() string
	Close() error
}

// startCombineServer starts the in-process endpoint --server names: the
// memory endpoint, over HTTPS unless --tls=false (with the TLS
// configuration that trusts it), or the embedded server (gofakes3, plain
// HTTP).
func startCombineServer(o *benchOptions) (combineServer, *tls.Config, error) {
	switch o.server {
	case bench.ServerEmbedded:
		if o.tls {
			return nil, nil, usagef("--tls needs --server memory: the embedded server speaks plain HTTP (use --tls=false)")
		}
		srv, err := embedded.StartWith(embedded.Options{Buckets: []string{"bench"}, AccessKeyID: "durashuffle", SecretAccessKey: "durashuffle"})
		if err != nil {
			return nil, nil, err
		}
		return srv, nil, nil
	case bench.ServerMemory, "":
		if !o.tls {
			srv, err := bench.StartMemServer("bench")
			return srv, nil, err
		}
		dir, err := os.MkdirTemp("", "durashuffle-bench-combine-")
		if err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(dir) // the server holds its certificate in memory
		srv, tlsCfg, err := bench.StartMemServerHTTPS(dir, "bench")
		if err != nil {
			return nil, nil, err
		}
		return srv, tlsCfg, nil
	}
	return nil, nil, usagef("--server %q: want memory or embedded", o.server)
}
