//go:build bench

// The bench is built only with -tags bench (make build, make bench), so
// that the binary go run ./cmd/durashuffle builds (make run) leaves its
// plotting, font and link-shaping libraries out; bench_off.go stands in.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/cmd/durashuffle/internal/bench"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
)

type benchOptions struct {
	latency       time.Duration
	connBandwidth durashuffle.Size
	rounds        int
	stored        durashuffle.Size
	partitions    int
	producers     int
	workers       int
	writeRows     int
	poolRows      int
	input         string
	seed          uint64
	readers       int
	smallRows     string
	smallOverLink bool
	writeOnly     string
	writers       string
	logical       string
	chunkSizes    string
	concurrencies string
	partCounts    string
	partWriters   string
	rangeReaders  int
	fanShapes     string
	fanSizes      string
	fanParts      int
	fanBudget     durashuffle.Size
	json          bool
	plot          string
	out           string
	markdown      string
	cpuProfile    string
	memProfile    string
	server        string
	tls           bool
	memLimit      string
	faults        string
}

func (a *app) benchCommand() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure durashuffle against the alternatives over a shaped link",
		Long: `bench measures durashuffle's write and read paths over a shaped link and
against what a user would otherwise run, on the same link, with the same
part size and concurrency:

  write          durashuffle (also with spill off, and on a null store for
                 what its upload costs in CPU) vs sequential (each chunk
                 uploaded by the goroutine that built it, Druid before
                 apache/druid#16481) vs the AWS SDK's transfermanager uploading the same
                 already-encoded bytes; durashuffle's CPU by stage (codec,
                 crc32c, tls, http, ...) from CPU profiles of its children
  read           durashuffle reading every partition vs transfermanager
                 downloading the same objects whole
  small-batches  the same rows written as 128-row and as 8192-row batches
  encode         the CPU side alone (uploads discarded), 1 and N writer
                 goroutines, with the CPU by stage
  memory         peak RSS writing 1 GiB and 4 GiB of logical output
  sweep          chunk sizes x concurrencies, with a recommended configuration
  partitions     the same rows written into 64 to 8192 partitions by 1 and 8
                 writers (fresh 8192-row batches split across them), each stage
                 read back by 8 range readers of P/8 partitions and downloaded
                 whole by transfermanager and manager: throughput, stored
                 bytes, frames, PUTs, GETs and peak RSS against the bound
  fan            W writers x R readers at 2048 partitions, each writer 1x, 8x
                 and 16x its coalesce_budget: durashuffle with spill on and
                 off against Druid's layout (an object per writer and
                 partition) and Spark's sort shuffle (a partition-sorted map
                 file per writer, uploaded with transfermanager): write and
                 read time, requests, stored bytes, RSS and local disk
  all            every scenario; --out and --markdown write the charts and tables

write and read also run on Azure Blob Storage and Google Cloud Storage,
the store chosen as for every command (--store azure|gcs with
--azure-account, --endpoint for Azurite or fake-gcs-server): their
baselines are then the store's own SDK helpers, azblob (UploadStream,
DownloadBuffer) and gcs-client (storage.Writer, NewRangeReader), with
the same part size and concurrency; small-batches, encode, memory and
sweep run on every store, partitions, fastpath and fan on S3 only.

The link is toxiproxy, in process, in front of the endpoint (an in-memory
S3 endpoint built for benchmarks unless --endpoint is given; --server
embedded uses the demo's server): --latency per request round trip
and --conn-bandwidth per connection, both directions. Every contender gets
upload_concurrency connections, so the link limit is upload_concurrency x
conn_bandwidth. Each contender runs in a child process, so its peak RSS is
its own; rounds alternate contenders and medians are reported. On a
terminal, live bars show the run under way (round, contender, ETA) and what
its child has encoded, uploaded or read; --quiet turns them off.`,
		Example: `  durashuffle bench write
  durashuffle bench read --json
  durashuffle bench sweep --chunk-sizes 5MiB,100MB --concurrencies 5,10,30 --plot sweep.png
  AWS_PROFILE=bench durashuffle bench write --endpoint https://s3.eu-west-1.amazonaws.com \
    --region eu-west-1 --bucket my-bench --latency 0 --conn-bandwidth 0`,
	}
	pf := cmd.PersistentFlags()
	o.connBandwidth = 8 * durashuffle.MiB
	o.stored = 256 * durashuffle.MiB
	pf.DurationVar(&o.latency, "latency", 20*time.Millisecond, "added round-trip latency per request (half on each direction); 0 with --conn-bandwidth 0: no shaping")
	pf.Var(sizeFlag(&o.connBandwidth), "conn-bandwidth", "bandwidth per connection and direction (bytes per second, e.g. 8MiB)")
	pf.IntVar(&o.rounds, "rounds", 3, "rounds per contender, alternated; medians are reported")
	pf.Var(sizeFlag(&o.stored), "stored", "stored (encoded) size of the data set for write, read, small-batches, encode, sweep and partitions")
	pf.IntVar(&o.partitions, "partitions", 64, "output partitions")
	pf.IntVar(&o.producers, "producers", 2, "goroutines calling Write per worker")
	pf.IntVar(&o.workers, "workers", 1, "writers (one data object each) per contender")
	pf.IntVar(&o.writeRows, "write-rows", 128, "rows per Write call (the demo's 8192-row input batches split over 64 partitions)")
	pf.IntVar(&o.poolRows, "pool-rows", 8192, "pre-generated distinct rows per partition (more than a frame's worth)")
	pf.StringVar(&o.input, "input", bench.InputPool, "input rows: pool (pre-generated, sliced) or fresh (generated while writing)")
	pf.Uint64Var(&o.seed, "seed", 1, "generator seed")
	pf.IntVar(&o.readers, "readers", 8, "partitions the durashuffle reader streams at once")
	pf.StringVar(&o.smallRows, "small-rows", "128,8192", "small-batches: the two Write sizes in rows, small first")
	pf.BoolVar(&o.smallOverLink, "small-over-link", false, "small-batches over the link instead of the null store")
	pf.StringVar(&o.writeOnly, "write-contenders", "", "write: only these contenders, comma-separated (durashuffle, durashuffle-encrypted, durashuffle-auto, durashuffle-spill-off, durashuffle-encode-only, sequential, and the store's baselines: transfermanager, manager on S3, azblob on Azure, gcs-client on GCS); targets comparing one left out are not reported (default: all)")
	pf.StringVar(&o.writers, "writers", "1,"+strconv.Itoa(runtime.NumCPU()), "encode: writer goroutine counts")
	pf.StringVar(&o.logical, "logical", "1GiB,4GiB", "memory: logical output sizes")
	pf.StringVar(&o.chunkSizes, "chunk-sizes", "5MiB,8MiB,100MB", "sweep: chunk sizes")
	pf.StringVar(&o.concurrencies, "concurrencies", "5,10,30", "sweep: upload concurrencies")
	pf.StringVar(&o.partCounts, "partition-counts", "64,512,2048,8192", "partitions: partition counts (the targets compare 2048 with the smallest)")
	pf.StringVar(&o.partWriters, "partition-writers", "1,8", "partitions: writer counts (writers on one client, one data object each)")
	pf.IntVar(&o.rangeReaders, "range-readers", 8, "partitions: range readers reading each stage at once, P / range-readers partitions each")
	o.fanBudget = 8 * durashuffle.MiB
	pf.StringVar(&o.fanShapes, "fan-shapes", "8x8,32x8", "fan: shapes, WRITERSxREADERS, comma-separated")
	pf.StringVar(&o.fanSizes, "fan-sizes", "1,8,16", "fan: each writer's logical output, in multiples of --fan-coalesce-budget")
	pf.IntVar(&o.fanParts, "fan-partitions", 2048, "fan: partitions")
	pf.Var(sizeFlag(&o.fanBudget), "fan-coalesce-budget", "fan: coalesce_budget of every contender (the druid and map-file writers sort in as much memory)")
	pf.BoolVar(&o.json, "json", false, "print each scenario's report as one JSON object")
	pf.StringVar(&o.plot, "plot", "", "draw the results into this PNG file")
	pf.StringVar(&o.out, "out", "", "all: write <scenario>.json and <scenario>.png into this directory")
	pf.StringVar(&o.markdown, "markdown", "", "all: rewrite the generated tables of this Markdown file (BENCHMARKS.md)")
	pf.StringVar(&o.server, "server", bench.ServerMemory, "in-process endpoint (no --endpoint): memory (built for benchmarks) or embedded (gofakes3)")
	pf.BoolVar(&o.tls, "tls", true, "the in-process endpoint serves HTTPS, as S3 does; --tls=false for plain HTTP")
	pf.StringVar(&o.faults, "faults", "", "faults between link and endpoint, e.g. slowdown=0.1,reset=0.02,seed=7 (internal/testkit/faultproxy)")
	pf.StringVar(&o.memLimit, "memory-limit", "", "memory: memory_limit values to compare, comma-separated: auto, off, bound or a size (default: the configuration's)")
	pf.StringVar(&o.cpuProfile, "cpuprofile", "", "CPU profile of the parent to FILE and of each child to FILE.<scenario>-<contender>-<round>")
	pf.StringVar(&o.memProfile, "memprofile", "", "heap profile of each child at its highest live heap to FILE.<scenario>-<contender>-<round>")

	examples := map[string]string{
		bench.ScenarioWrite: `  durashuffle bench write --rounds 5 --plot write.png
  durashuffle bench write --endpoint http://127.0.0.1:9000 --path-style --bucket bench
  durashuffle bench write --store gcs --endpoint http://127.0.0.1:4443 --bucket bench`,
		bench.ScenarioRead: `  durashuffle bench read --readers 16 --json
  AZURE_STORAGE_KEY=... durashuffle bench read --store azure --azure-account devstoreaccount1 \
    --endpoint http://127.0.0.1:10000/devstoreaccount1 --bucket bench`,
		bench.ScenarioSmallBatches: `  durashuffle bench small-batches --small-rows 128,8192`,
		bench.ScenarioEncode:       `  durashuffle bench encode --writers 1,2,4`,
		bench.ScenarioMemory:       `  durashuffle bench memory --logical 1GiB,4GiB --memory-limit auto,off`,
		bench.ScenarioSweep:        `  durashuffle bench sweep --chunk-sizes 5MiB,100MB --concurrencies 5,10,30 --plot sweep.png`,
		bench.ScenarioFastpath: `  durashuffle bench fastpath --stored 64MiB --rounds 2
  durashuffle bench fastpath --endpoint http://127.0.0.1:9000 --path-style --bucket bench --latency 0 --conn-bandwidth 0`,
		bench.ScenarioFan: `  durashuffle bench fan --plot fan.png
  durashuffle bench fan --fan-shapes 8x8 --fan-sizes 1,16 --fan-partitions 256 --rounds 1`,
		bench.ScenarioPartitions: `  durashuffle bench partitions --plot partitions.png
  durashuffle bench partitions --stored 64MiB --partition-counts 64,2048 --partition-writers 1,8 --rounds 1`,
	}
	for _, s := range bench.Scenarios {
		cmd.AddCommand(&cobra.Command{
			Use:     s,
			Short:   "Run the " + s + " scenario",
			Example: examples[s],
			Args:    noArgs,
			RunE: func(c *cobra.Command, _ []string) error {
				return a.runBench(c.Context(), o, []string{s})
			},
		})
	}
	cmd.AddCommand(a.benchCombineCommand(o))
	cmd.AddCommand(&cobra.Command{
		Use:     "all",
		Short:   "Run every scenario",
		Example: "  durashuffle bench all --out docs/bench --markdown BENCHMARKS.md",
		Args:    noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return a.runBench(c.Context(), o, bench.Scenarios)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:    "replot",
		Short:  "Redraw the charts in --out (and --markdown's tables) from the JSON reports there",
		Hidden: true,
		Args:   noArgs,
		RunE: func(*cobra.Command, []string) error {
			if o.out == "" {
				return usagef("replot needs --out DIR")
			}
			reps, err := bench.Replot(o.out)
			if err != nil || o.markdown == "" {
				return err
			}
			return bench.UpdateMarkdown(o.markdown, reps, o.out)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:    "child",
		Short:  "Run one contender (internal: reads a job on stdin)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return bench.RunChild(c.Context(), a.stdin, a.stdout)
		},
	})
	return cmd
}

func (a *app) runBench(ctx context.Context, o *benchOptions, scenarios []string) error {
	cfg, err := a.config()
	if err != nil {
		return err
	}
	opts, err := o.options(cfg)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	opts.Runner = &bench.Runner{Command: []string{exe, "bench", "child"}, Stderr: a.stderr, CPUProfile: o.cpuProfile, MemProfile: o.memProfile}
	opts.Log = a.stderr
	bars := a.newBenchBars()
	if bars != nil {
		opts.Runner.Watch = bars
		opts.Runner.Stderr, opts.Log = bars.log, bars.log
	}
	stopProfile, err := bench.StartCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	env, err := bench.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer env.Close()
	var reports []*bench.Report
	for _, s := range scenarios {
		bars.begin(s)
		rep, err := env.Run(ctx, s)
		bars.end(err)
		if err != nil {
			return fmt.Errorf("bench %s: %w", s, err)
		}
		reports = append(reports, rep)
		if o.json {
			if err := printJSON(a.stdout, rep); err != nil {
				return err
			}
		} else {
			bench.PrintText(a.stdout, rep)
			fmt.Fprintln(a.stdout)
		}
		if o.plot != "" && len(scenarios) == 1 {
			if err := bench.Plot(rep, o.plot); err != nil {
				return fmt.Errorf("plot: %w", err)
			}
		}
		if o.out != "" {
			if err := writeBenchOut(o.out, rep); err != nil {
				return err
			}
		}
	}
	if o.markdown != "" {
		if err := bench.UpdateMarkdown(o.markdown, reports, o.out); err != nil {
			return err
		}
	}
	return nil
}

func writeBenchOut(dir string, rep *bench.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, rep.Scenario+".json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return bench.Plot(rep, filepath.Join(dir, rep.Scenario+".png"))
}

func (o *benchOptions) options(cfg durashuffle.Config) (*bench.Options, error) {
	if o.rounds < 1 {
		return nil, usagef("--rounds must be at least 1, got %d", o.rounds)
	}
	if o.input != bench.InputPool && o.input != bench.InputFresh {
		return nil, usagef("--input %q: want pool or fresh", o.input)
	}
	if o.partitions < 1 || o.producers < 1 || o.workers < 1 || o.writeRows < 1 || o.readers < 1 || o.poolRows < 1 || o.rangeReaders < 1 {
		return nil, usagef("--partitions, --producers, --workers, --write-rows, --pool-rows, --readers and --range-readers must be at least 1")
	}
	partCounts, err := intList("--partition-counts", o.partCounts)
	if err != nil {
		return nil, err
	}
	partWriters, err := intList("--partition-writers", o.partWriters)
	if err != nil {
		return nil, err
	}
	fanShapes, err := bench.ParseFanShapes(o.fanShapes)
	if err != nil {
		return nil, usagef("--fan-shapes: %v", err)
	}
	fanSizes, err := intList("--fan-sizes", o.fanSizes)
	if err != nil {
		return nil, err
	}
	if o.fanParts < 1 {
		return nil, usagef("--fan-partitions must be at least 1, got %d", o.fanParts)
	}
	small, err := intList("--small-rows", o.smallRows)
	if err != nil {
		return nil, err
	}
	var writeOnly []string
	if o.writeOnly != "" {
		for _, n := range strings.Split(o.writeOnly, ",") {
			n = strings.TrimSpace(n)
			if !slices.Contains(bench.WriteContenders, n) {
				return nil, usagef("--write-contenders: %q is not a contender of write; they are %s", n, strings.Join(bench.WriteContenders, ", "))
			}
			writeOnly = append(writeOnly, n)
		}
	}
	writers, err := intList("--writers", o.writers)
	if err != nil {
		return nil, err
	}
	concs, err := intList("--concurrencies", o.concurrencies)
	if err != nil {
		return nil, err
	}
	chunks, err := sizeList("--chunk-sizes", o.chunkSizes)
	if err != nil {
		return nil, err
	}
	for _, c := range chunks {
		// The configuration's own check: chunk_size's range is stated once.
		trial := cfg
		trial.Write.ChunkSize = c
		if err := trial.Validate(); err != nil {
			return nil, usagef("--chunk-sizes %s: %v", c, err)
		}
	}
	logical, err := sizeList("--logical", o.logical)
	if err != nil {
		return nil, err
	}
	var faults *faultproxy.Spec
	if o.faults != "" {
		spec, err := faultproxy.ParseSpec(o.faults)
		if err != nil {
			return nil, usagef("--faults: %v", err)
		}
		faults = &spec
	}
	opts := &bench.Options{
		Config: cfg, Latency: o.latency, ConnBandwidth: int64(o.connBandwidth), Rounds: o.rounds,
		Stored: int64(o.stored), Readers: o.readers, SmallRows: small, SmallOverLink: o.smallOverLink, WriteContenders: writeOnly,
		Writers: writers, Concurrencies: concs, ChunkSizes: chunks, Server: o.server, TLS: o.tls, Faults: faults,
		PartitionCounts: partCounts, PartitionWriters: partWriters, RangeReaders: o.rangeReaders, WidePartitions: 2048,
		FanShapes: fanShapes, FanMultiples: fanSizes, FanPartitions: o.fanParts, FanCoalesceBudget: o.fanBudget,
		Data: bench.Data{Input: o.input, Partitions: o.partitions, WriteRows: o.writeRows, PoolRows: o.poolRows,
			Producers: o.producers, Workers: o.workers, Seed: o.seed},
	}
	for _, l := range logical {
		opts.MemLogical = append(opts.MemLogical, int64(l))
	}
	for _, f := range strings.Split(o.memLimit, ",") {
		var m durashuffle.MemoryLimit
		switch f = strings.TrimSpace(f); f {
		case "":
			continue
		case "bound":
			m = durashuffle.MemoryLimit(cfg.MemoryBound(durashuffle.MemoryLoad{Writers: max(1, o.workers)}))
		default:
			if err := m.UnmarshalText([]byte(f)); err != nil {
				return nil, usagef("--memory-limit %q: want auto, off, bound or a size, comma-separated", o.memLimit)
			}
		}
		opts.MemoryLimits = append(opts.MemoryLimits, m)
	}
	return opts, nil
}

func intList(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, usagef("%s: %q is not a positive integer", flag, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// sizeFlag is a flag of a size with units (8MiB, 1.5GiB, 1048576).
func sizeList(flag, s string) ([]durashuffle.Size, error) {
	var out []durashuffle.Size
	for _, f := range strings.Split(s, ",") {
		v, err := durashuffle.ParseSize(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, usagef("%s: %q is not a size", flag, f)
		}
		out = append(out, v)
	}
	return out, nil
}

// runnableCommands is how many runnable commands this binary has, the
// bench's included (TestEveryCommandHasAnExample walks them all).
const runnableCommands = 16
