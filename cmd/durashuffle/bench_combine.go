//go:build bench

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/cmd/durashuffle/internal/bench"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/embedded"
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
	Direct      combineBenchStep   `json:"direct"`
	Combine     combineBenchStep   `json:"combine"`
	Combined    combineBenchStep   `json:"combined"`
	Predicted   combine.Prediction `json:"predicted"`
}

type combineBenchStep struct {
	Seconds float64 `json:"seconds"`
	GETs    int64   `json:"gets"`
	PUTs    int64   `json:"puts"` // PUT-class: PutObject, multipart calls, LIST
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
	)
	cmd := &cobra.Command{
		Use:   "combine",
		Short: "Read a stage as written and combined: requests and time, over the shaped link",
		Long: `bench combine writes a stage of W writers x P partitions (--stored bytes of
random rows) to the embedded S3 server behind the shaped link (--latency,
--conn-bandwidth), reads it with P readers of one partition each
(--combine-readers at once), combines it (durashuffle combine, --groups and
--buckets or the plan's sizes) and reads it again. It reports the GETs,
PUTs and seconds of each step beside the plan's predictions.`,
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
				r, err := runCombineBench(cmd.Context(), o, w, p, stored, readers, parallel, combine.Options{Groups: groups, Buckets: buckets})
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
	return cmd
}

func runCombineBench(ctx context.Context, o *benchOptions, W, P int, stored int64, readers, parallel int, co combine.Options) (combineBench, error) {
	res := combineBench{Shape: fmt.Sprintf("%dx%d", W, P), Writers: W, Partitions: P}
	srv, err := embedded.Start("", "bench")
	if err != nil {
		return res, err
	}
	defer srv.Close()
	link, err := bench.StartLink(srv.Endpoint(), o.latency, int64(o.connBandwidth))
	if err != nil {
		return res, err
	}
	defer link.Close()
	hc, tr := bench.HTTPClient(link.Addr, 64, nil)
	defer tr.CloseIdleConnections()
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = "bench", srv.Endpoint(), true
	counter := new(store.Counter)
	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(srv.Credentials()), durashuffle.WithHTTPClient(hc), durashuffle.WithCounter(counter))
	if err != nil {
		return res, err
	}
	defer c.Close()

	// The stage: every writer writes rows of 1 KiB of random bytes into
	// every partition, stored/(W x P) bytes each.
	rows := max(1, int(stored/int64(W*P)/1024))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for w := range W {
		g.Go(func() error {
			wr, err := c.NewWriter(gctx, durashuffle.WriterOptions{Query: "bench", Stage: 0, Worker: strconv.Itoa(w), Partitions: P})
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
			_, err = wr.Commit(gctx)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	m, err := c.Seal(ctx, "bench", 0, W)
	if err != nil {
		return res, err
	}
	res.StoredBytes = m.Totals.BytesStored

	if res.Direct, err = combineBenchRead(ctx, c, counter, P, readers); err != nil {
		return res, err
	}
	before, start := counter.Requests(), time.Now()
	cs, err := c.Combine(ctx, "bench", 0, co)
	if err != nil {
		return res, err
	}
	if _, err := cs.RunAll(ctx, parallel); err != nil {
		return res, err
	}
	if _, err := cs.Seal(ctx); err != nil {
		return res, err
	}
	res.Combine = combineBenchCount(store.Diff(counter.Requests(), before), time.Since(start))
	p := cs.Plan()
	res.Groups, res.Buckets, res.Predicted = len(p.Groups), len(p.Buckets), p.Predict
	if res.Combined, err = combineBenchRead(ctx, c, counter, P, readers); err != nil {
		return res, err
	}
	return res, nil
}

// combineBenchRead runs P readers, readers at a time, each opening the
// stage and reading one partition whole.
func combineBenchRead(ctx context.Context, c *durashuffle.Client, counter *store.Counter, P, readers int) (combineBenchStep, error) {
	before, start := counter.Requests(), time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, readers))
	var mu sync.Mutex
	var rows int64
	for p := range P {
		g.Go(func() error {
			s, err := c.OpenStage(gctx, "bench", 0)
			if err != nil {
				return err
			}
			recs, err := s.ReadPartitions(gctx, []int{p})
			if err != nil {
				return err
			}
			defer recs.Close()
			var n int64
			for recs.Next() {
				n += recs.RecordBatch().NumRows()
			}
			mu.Lock()
			rows += n
			mu.Unlock()
			return recs.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return combineBenchStep{}, err
	}
	return combineBenchCount(store.Diff(counter.Requests(), before), time.Since(start)), nil
}

func combineBenchCount(d map[string]int64, took time.Duration) combineBenchStep {
	return combineBenchStep{Seconds: round(took.Seconds()), GETs: d["GetObject"],
		PUTs: d["PutObject"] + d["CreateMultipartUpload"] + d["UploadPart"] + d["CompleteMultipartUpload"] + d["ListObjectsV2"]}
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
	fmt.Fprintf(a.stdout, "%s (%s stored), %d groups x %d buckets:\n", r.Shape, mib(r.StoredBytes), r.Groups, r.Buckets)
	fmt.Fprintf(a.stdout, "  read as written  %7d GETs (predicted %7d)            %7.2f s\n", r.Direct.GETs, pr.Direct.GET, r.Direct.Seconds)
	fmt.Fprintf(a.stdout, "  combine          %7d GETs (predicted %7d), %5d PUTs (predicted %5d)  %7.2f s\n", r.Combine.GETs, pr.Combine.GET, r.Combine.PUTs, pr.Combine.PUT, r.Combine.Seconds)
	fmt.Fprintf(a.stdout, "  read combined    %7d GETs (predicted %7d)            %7.2f s\n", r.Combined.GETs, pr.Combined.GET, r.Combined.Seconds)
}
