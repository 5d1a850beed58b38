package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/spf13/cobra"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
)

type inspectObject struct {
	Key   string `json:"key"`
	Size  int64  `json:"size"`
	Parts int    `json:"parts"`
}

type inspectWorker struct {
	Worker        string          `json:"worker"`
	Attempt       string          `json:"attempt"`
	Rows          int64           `json:"rows"`
	Frames        int             `json:"frames"`
	BytesLogical  int64           `json:"bytes_logical"`
	BytesStored   int64           `json:"bytes_stored"`
	ChunkSize     int64           `json:"chunk_size"`
	Compression   string          `json:"compression"`
	Codecs        map[string]int  `json:"codecs,omitempty"` // frames per codec, from the manifest
	WriterVersion string          `json:"writer_version"`
	WrittenAt     time.Time       `json:"written_at"`
	Objects       []inspectObject `json:"objects"`
	// Peer is the sidecar that advertised the worker's frames in memory
	// when it committed (format 2.1 peer).
	Peer string `json:"peer,omitempty"`
	// Held says whether the sidecar of --sidecar holds the worker in
	// memory now (absent without --sidecar).
	Held *bool `json:"held,omitempty"`
}

type inspectPartition struct {
	Partition    int   `json:"partition"`
	Rows         int64 `json:"rows"`
	Frames       int   `json:"frames"`
	BytesLogical int64 `json:"bytes_logical"`
	BytesStored  int64 `json:"bytes_stored"`
}

type inspectSkew struct {
	MinStored  int64   `json:"min_bytes_stored"`
	MaxStored  int64   `json:"max_bytes_stored"`
	MeanStored float64 `json:"mean_bytes_stored"`
	MaxOverAvg float64 `json:"max_over_mean"`
}

type inspectOutput struct {
	Query         string             `json:"query"`
	Stage         int                `json:"stage"`
	Sealed        bool               `json:"sealed"`
	Results       bool               `json:"results"`
	Partitions    int                `json:"partitions"`
	Schema        []string           `json:"schema"`
	Totals        manifest.Totals    `json:"totals"`
	CompressRatio float64            `json:"compression_ratio"`
	Workers       []inspectWorker    `json:"workers"`
	PartitionList []inspectPartition `json:"partition_stats"`
	Skew          inspectSkew        `json:"skew"`
	Requests      map[string]int64   `json:"requests"`
	// RequestCost prices the stage's and this command's requests at the
	// list prices of the store in use.
	RequestCost *requestCost `json:"request_cost,omitempty"`
	// Sidecar is the memory store of --sidecar (absent without it).
	Sidecar *flightclient.HeldResult `json:"sidecar,omitempty"`
}

func (a *app) inspectCommand() *cobra.Command {
	var (
		sf          stageFlags
		asJSON      bool
		sidecarAddr string
	)
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Show a stage's workers, objects, partitions and compression",
		Long: `inspect loads a stage's manifest and its index's per-partition summary
(two GETs when the stage is sealed; a LIST and a GET per worker manifest
otherwise) and shows its workers with their
committed attempts and data objects (key, size, parts), every partition
with its rows and logical and stored bytes, the compression ratio, and a
histogram of per-partition stored bytes that makes skew visible, and what
storing the stage and the inspect itself cost in requests at the list
prices of the store in use (its write and read classes).

With --sidecar host:port it also asks that sidecar (the held action, with
auth_token as its bearer token) which of the stage's workers its memory
store holds, and shows each worker's advertised peer.`,
		Example: `  durashuffle inspect --bucket shuffle --query q42 --stage 0
  durashuffle inspect --bucket shuffle --query q42 --stage 0 --json | jq .partition_stats
  durashuffle inspect --bucket shuffle --query q42 --stage 0 --sidecar 127.0.0.1:8815`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			c, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			m, err := manifest.LoadStage(cmd.Context(), c.Store(), c.Layout(), sf.query, sf.stage)
			if err != nil {
				return err
			}
			per, err := m.Summary(cmd.Context(), c.Store(), c.Layout())
			if err != nil {
				return err
			}
			// The schema as a reader sees it, with no request (nil when it
			// does not decode: inspect still shows the rest).
			schema := reader.FromManifest(c.Store(), c.Layout(), m, reader.Options{}).Schema()
			out := describeStage(m, schema, per, c.Layout())
			out.Requests = c.Counter().Requests()
			if out.RequestCost, err = costOf(c.Config(), m, out.Requests); err != nil {
				return err
			}
			if sidecarAddr != "" {
				h, err := sidecarHeld(cmd.Context(), sidecarAddr, c.Config().Sidecar.AuthToken, sf.query, sf.stage)
				if err != nil {
					return err
				}
				out.Sidecar = h
				for i := range out.Workers {
					held := false
					for _, hw := range h.Workers {
						held = held || (hw.Worker == out.Workers[i].Worker && hw.Attempt == out.Workers[i].Attempt)
					}
					out.Workers[i].Held = &held
				}
			}
			if asJSON {
				return printJSON(a.stdout, out)
			}
			printInspect(a.stdout, out)
			return nil
		},
	}
	sf.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the stage as JSON")
	cmd.Flags().StringVar(&sidecarAddr, "sidecar", "", "also show which workers this sidecar (Flight host:port) holds in memory")
	return cmd
}

// requestCost is what requests cost at a store's list prices, by the
// store's request classes (combine.Prices).
type requestCost struct {
	Prices combine.Prices `json:"prices"`
	// StageWrites is the write-class requests that stored the stage: each
	// data object as the store's multipart upload stores one of its parts
	// (Prices.ObjectWrites) and each worker's manifest put; the seal's
	// few are not counted.
	StageWrites  int64   `json:"stage_writes"`
	StageDollars float64 `json:"stage_dollars"`
	// Requests is this command's own requests by class, Other those of
	// neither class (free or not priced).
	Requests combine.Requests `json:"requests"`
	Other    int64            `json:"other"`
	Dollars  float64          `json:"dollars"`
}

// priceLine is p as one line: store, tier and each class's price per
// 1,000 requests.
func priceLine(p combine.Prices) string {
	per1000 := func(f float64) string {
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.6f", f*1000), "0"), ".")
	}
	return fmt.Sprintf("%s (%s): %s $%s, %s $%s per 1,000 requests", p.Store, p.Tier, p.WriteClass, per1000(p.Write), p.ReadClass, per1000(p.Read))
}

// storePrices are the list prices of the store cfg names.
func storePrices(cfg durashuffle.Config) (combine.Prices, error) {
	return combine.PricesOf(cfg.Store.Type)
}

// costOf prices the writes that stored stage m and the requests ops (a
// command's own) at the prices of cfg's store.
func costOf(cfg durashuffle.Config, m *manifest.Stage, ops map[string]int64) (*requestCost, error) {
	p, err := storePrices(cfg)
	if err != nil {
		return nil, err
	}
	rc := &requestCost{Prices: p}
	for _, w := range m.Workers {
		rc.StageWrites++ // the worker manifest
		for _, o := range w.Objects {
			rc.StageWrites += p.ObjectWrites(int64(max(1, o.Parts)))
		}
	}
	rc.StageDollars = p.Dollars(combine.Requests{PUT: rc.StageWrites})
	rc.Requests, rc.Other = p.Classify(ops)
	rc.Dollars = p.Dollars(rc.Requests)
	return rc, nil
}

// sidecarHeld asks a sidecar which workers of a stage it holds.
func sidecarHeld(ctx context.Context, addr, token, query string, stage int) (*flightclient.HeldResult, error) {
	c, err := flightclient.Dial(addr, flightclient.Options{Token: token})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	h, err := c.Held(ctx, query, stage)
	if err != nil {
		return nil, fmt.Errorf("sidecar %s: held: %w", addr, err)
	}
	return h, nil
}

// describeStage summarizes a stage manifest, its schema and its
// partitions' totals (from the index's summary table, or the frames of an
// unsealed stage).
func describeStage(m *manifest.Stage, schema *arrow.Schema, per []manifest.PartitionStats, l manifest.Layout) *inspectOutput {
	out := &inspectOutput{
		Query: m.Query, Stage: m.Stage, Sealed: m.Sealed, Results: m.Results, Partitions: m.Partitions,
		Workers: []inspectWorker{}, PartitionList: make([]inspectPartition, m.Partitions),
	}
	if schema != nil {
		for _, f := range schema.Fields() {
			out.Schema = append(out.Schema, f.Name+": "+f.Type.String())
		}
	}
	for p := range out.PartitionList {
		ps := &out.PartitionList[p]
		ps.Partition = p
		if p < len(per) {
			ps.Rows, ps.Frames, ps.BytesLogical, ps.BytesStored = per[p].Rows, int(per[p].Frames), per[p].BytesLogical, per[p].BytesStored
		}
	}
	for _, w := range m.Workers {
		t := w.Totals
		iw := inspectWorker{
			Worker: w.Worker, Attempt: w.Attempt, Rows: t.Rows, Frames: t.Frames,
			BytesLogical: t.BytesLogical, BytesStored: t.BytesStored, ChunkSize: w.ChunkSize,
			Compression: w.Compression, Codecs: w.Codecs, WriterVersion: w.WriterVersion, WrittenAt: w.WrittenAt,
			Objects: []inspectObject{}, Peer: w.Peer,
		}
		for _, o := range w.Objects {
			iw.Objects = append(iw.Objects, inspectObject{Key: l.ObjectKey(m.Query, m.Stage, o.Key), Size: o.Size, Parts: o.Parts})
		}
		out.Workers = append(out.Workers, iw)
		out.Totals.Rows += t.Rows
		out.Totals.BytesLogical += t.BytesLogical
		out.Totals.BytesStored += t.BytesStored
		out.Totals.Frames += t.Frames
		out.Totals.Objects += t.Objects
		out.Totals.Parts += t.Parts
	}
	out.CompressRatio = ratio(float64(out.Totals.BytesLogical), float64(out.Totals.BytesStored))
	if len(out.PartitionList) > 0 {
		sizes := partitionSizes(out.PartitionList)
		var sum int64
		for _, s := range sizes {
			sum += s
		}
		out.Skew.MinStored, out.Skew.MaxStored = slices.Min(sizes), slices.Max(sizes)
		out.Skew.MeanStored = round(float64(sum) / float64(len(sizes)))
		out.Skew.MaxOverAvg = ratio(float64(out.Skew.MaxStored), out.Skew.MeanStored)
	}
	return out
}

func partitionSizes(ps []inspectPartition) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.BytesStored
	}
	return out
}

func printInspect(w io.Writer, s *inspectOutput) {
	state := "sealed"
	if !s.Sealed {
		state = "not sealed (read from worker manifests)"
	}
	kind := "shuffle stage"
	if s.Results {
		kind = "results stage"
	}
	fmt.Fprintf(w, "%s stage %d: %s, %s\n", s.Query, s.Stage, kind, state)
	fmt.Fprintf(w, "  %d rows in %d partitions, %d frames, %d objects, %d parts\n",
		s.Totals.Rows, s.Partitions, s.Totals.Frames, s.Totals.Objects, s.Totals.Parts)
	fmt.Fprintf(w, "  %s logical, %s stored, compression ratio %.2f\n",
		mib(s.Totals.BytesLogical), mib(s.Totals.BytesStored), s.CompressRatio)
	if len(s.Schema) > 0 {
		fmt.Fprintf(w, "  schema: %s\n", strings.Join(s.Schema, ", "))
	}

	fmt.Fprintln(w, "\nworkers")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "  WORKER\tATTEMPT\tROWS\tFRAMES\tLOGICAL\tSTORED\tCOMPRESSION\tWRITTEN\tPEER"
	if s.Sidecar != nil {
		head += "\tHELD"
	}
	fmt.Fprintln(tw, head)
	for _, x := range s.Workers {
		peer := x.Peer
		if peer == "" {
			peer = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s", x.Worker, x.Attempt, x.Rows, x.Frames,
			mib(x.BytesLogical), mib(x.BytesStored), compressionString(x.Compression, x.Codecs), x.WrittenAt.Format(time.RFC3339), peer)
		if x.Held != nil {
			held := "no"
			if *x.Held {
				held = "yes"
			}
			fmt.Fprintf(tw, "\t%s", held)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if s.Sidecar != nil {
		fmt.Fprintf(w, "  sidecar memory store: %s of %s held, %s reserved\n", mib(s.Sidecar.HeldBytes), mib(s.Sidecar.BudgetBytes), mib(s.Sidecar.ReservedBytes))
	}

	fmt.Fprintln(w, "\nobjects")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tSIZE\tBYTES\tPARTS")
	for _, x := range s.Workers {
		for _, o := range x.Objects {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\n", o.Key, mib(o.Size), o.Size, o.Parts)
		}
	}
	tw.Flush()

	fmt.Fprintln(w, "\npartitions")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tROWS\tFRAMES\tLOGICAL\tSTORED\t")
	for _, p := range s.PartitionList {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t\n", p.Partition, p.Rows, p.Frames, mib(p.BytesLogical), mib(p.BytesStored))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nstored bytes per partition (min %s, mean %s, max %s, max/mean %.2f)\n",
		mib(s.Skew.MinStored), mib(int64(s.Skew.MeanStored)), mib(s.Skew.MaxStored), s.Skew.MaxOverAvg)
	for _, line := range histogram(partitionSizes(s.PartitionList), 8, 40) {
		fmt.Fprintln(w, "  "+line)
	}
	if rc := s.RequestCost; rc != nil {
		p := rc.Prices
		fmt.Fprintf(w, "\nrequests at %s\n", priceLine(p))
		fmt.Fprintf(w, "  storing the stage: %d %s ($%.6f)\n", rc.StageWrites, p.WriteClass, rc.StageDollars)
		fmt.Fprintf(w, "  this inspect: %d %s, %d %s, %d other ($%.6f)\n", rc.Requests.GET, p.ReadClass, rc.Requests.PUT, p.WriteClass, rc.Other, rc.Dollars)
	}
}

// histogram bins sizes into at most bins equal ranges between their
// minimum and maximum and draws one bar per bin, width chars at most.
func histogram(sizes []int64, bins, width int) []string {
	if len(sizes) == 0 {
		return nil
	}
	lo, hi := slices.Min(sizes), slices.Max(sizes)
	if lo == hi {
		return []string{fmt.Sprintf("%10s  %s %d", mib(lo), strings.Repeat("#", width), len(sizes))}
	}
	counts := make([]int, bins)
	step := float64(hi-lo) / float64(bins)
	for _, s := range sizes {
		b := int(float64(s-lo) / step)
		counts[min(b, bins-1)]++
	}
	top := slices.Max(counts)
	out := make([]string, bins)
	for b, n := range counts {
		from := lo + int64(float64(b)*step)
		to := lo + int64(float64(b+1)*step)
		bar := strings.Repeat("#", (n*width+top-1)/top)
		out[b] = fmt.Sprintf("%10s - %-10s |%-*s %d", mib(from), mib(to), width, bar, n)
	}
	return out
}

// compressionString is the configured compression with the frames' codec
// mix when there is more than one codec: "auto (lz4 12, zstd 40)".
func compressionString(compression string, codecs map[string]int) string {
	if len(codecs) < 2 && compression != "auto" {
		return compression
	}
	names := slices.Sorted(maps.Keys(codecs))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, codecs[n])
	}
	return compression + " (" + strings.Join(parts, ", ") + ")"
}
