package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// DurashuffleRanges reads a stage the way a downstream stage with Spark
// AQE does (bench partitions): RangeReaders readers at once, each opening
// the stage on its own and reading one contiguous range of partitions.
const DurashuffleRanges = "durashuffle-ranges"

// The shape of bench partitions' request target: a stage of
// getTargetWriters writers at the wide partition count, read by 8 range
// readers, costs at most getTargetMax GETs, data and metadata together.
const (
	getTargetWriters = 4
	getTargetMax     = 100
)

// PartitionsRow is one cell of bench partitions: a stage of Partitions
// partitions written by Writers writers on one client, then read back by
// range readers (Read), and its data objects downloaded whole by
// transfermanager (TM) and manager. Each is the median of the cell's
// rounds; reports from before TM and Manager were measured have them
// zero.
type PartitionsRow struct {
	Partitions int    `json:"partitions"`
	Writers    int    `json:"writers"`
	Write      Result `json:"write"`
	Read       Result `json:"read"`
	TM         Result `json:"transfermanager"`
	Manager    Result `json:"manager"`
}

func (r PartitionsRow) name() string {
	return fmt.Sprintf("P=%d x %s", r.Partitions, writersName(r.Writers))
}

// partitionCells is the scenario's grid: every partition count at every
// writer count, plus getTargetWriters at the wide count when the grid
// does not have it.
func (e *Env) partitionCells() []PartitionsRow {
	var cells []PartitionsRow
	have := false
	for _, p := range e.o.PartitionCounts {
		for _, w := range e.o.PartitionWriters {
			cells = append(cells, PartitionsRow{Partitions: p, Writers: w})
			have = have || (p == e.o.WidePartitions && w == getTargetWriters)
		}
	}
	if !have && slices.Contains(e.o.PartitionCounts, e.o.WidePartitions) {
		cells = append(cells, PartitionsRow{Partitions: e.o.WidePartitions, Writers: getTargetWriters})
	}
	slices.SortStableFunc(cells, func(a, b PartitionsRow) int {
		return cmp.Or(cmp.Compare(a.Partitions, b.Partitions), cmp.Compare(a.Writers, b.Writers))
	})
	return cells
}

// partitionReaders are the reads of every cell of bench partitions: the
// range readers, and transfermanager and manager downloading the same data
// objects whole.
var partitionReaders = []string{DurashuffleRanges, TransferManager, Manager}

// readOrder is the order of the cell's reads in a round: rotated from
// round to round, as the other scenarios rotate their contenders, so
// that no reader always runs first after the write.
func readOrder(round int) []string {
	n := len(partitionReaders)
	order := make([]string, n)
	for k := range order {
		order[k] = partitionReaders[(k+round)%n]
	}
	return order
}

// runPartitions: the same logical rows written into 64 to 8192
// partitions by 1 and 8 writers, as a wide shuffle's map side hands them
// over (fresh 8192-row batches split across the partitions), then read
// back by range readers, and downloaded whole by transfermanager and
// manager with the same part size and concurrency on the same link;
// throughput, stored bytes, requests and peak RSS of the children, the
// durashuffle ones against the bound of what each runs.
func (e *Env) runPartitions(ctx context.Context) (*Report, error) {
	cfg := e.o.Config
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	d := e.data(e.o.Stored, spl)
	d.Input = InputFresh
	d.WriteRows = 8192
	readers := max(1, e.o.RangeReaders)
	rep := &Report{Scenario: ScenarioPartitions, Link: e.Link.Info(cfg.Write.UploadConcurrency), Setup: e.setup(d, cfg, e.storeName(), spl)}
	rep.Setup.Partitions, rep.Setup.Workers, rep.Setup.Readers = 0, 0, readers
	cells := e.partitionCells()
	e.logf("partitions: %d rows (~%s stored), partitions %v x writers %v, %d range readers, transfermanager and manager", d.Rows, sizeString(e.o.Stored), e.o.PartitionCounts, e.o.PartitionWriters, readers)
	if err := e.probe(ctx, rep, cfg); err != nil {
		return nil, err
	}
	writes := make([][]*Result, len(cells))
	reads := make([]map[string][]*Result, len(cells))
	for i := range reads {
		reads[i] = map[string][]*Result{}
	}
	rounds := max(1, e.o.Rounds)
	perCell := 1 + len(partitionReaders)
	runs := perCell * rounds * len(cells)
	for round := range rounds {
		for k := range cells {
			i := (k + round) % len(cells)
			c := cells[i]
			dd := d
			dd.Partitions, dd.Workers = c.Partitions, c.Writers
			q := e.query("partitions", strconv.Itoa(c.Partitions), strconv.Itoa(c.Writers), strconv.Itoa(round))
			run := perCell * (round*len(cells) + k)
			wj := e.job("write", Durashuffle, q, cfg, dd)
			wj.Round = &Round{Name: c.name() + " write", Round: round + 1, Rounds: rounds, Run: run + 1, Runs: runs}
			w, err := e.o.Runner.Run(ctx, wj)
			if err != nil {
				e.cleanup(ctx, q)
				return nil, fmt.Errorf("round %d, %s write: %w", round+1, c.name(), err)
			}
			got := map[string]*Result{}
			for n, name := range readOrder(round) {
				rj := e.job("read", name, q, cfg, dd)
				if name == DurashuffleRanges {
					rj.Readers = readers
				} else {
					rj.Keys = w.Keys
				}
				rj.Round = &Round{Name: c.name() + " " + readName(name), Round: round + 1, Rounds: rounds, Run: run + 2 + n, Runs: runs}
				r, err := e.o.Runner.Run(ctx, rj)
				if err != nil {
					e.cleanup(ctx, q)
					return nil, fmt.Errorf("round %d, %s %s: %w", round+1, c.name(), readName(name), err)
				}
				if name == DurashuffleRanges {
					// The stage's stored bytes are what the read moved; the
					// child counts what its GETs carried (DataGetBytes), not
					// the stage.
					r.StoredBytes, r.Frames, r.Objects = w.StoredBytes, w.Frames, w.Objects
				} else {
					// The downloads count the bytes they received; the rows
					// in them are the stage's.
					r.LogicalBytes, r.Rows = w.LogicalBytes, w.Rows
				}
				r.finish(secondsDuration(r.Seconds))
				got[name] = r
				reads[i][name] = append(reads[i][name], r)
			}
			e.cleanup(ctx, q)
			r, tm, mgr := got[DurashuffleRanges], got[TransferManager], got[Manager]
			e.logf("  round %d %-22s write %6.2f s %6.1f MiB/s logical, rss %5.0f MiB; range read %6.2f s %6.1f MiB/s logical, %d+%d GETs, rss %5.0f MiB; transfermanager %6.2f s, manager %6.2f s",
				round+1, c.name(), w.Seconds, w.LogicalBytesPerS/(1<<20), float64(w.PeakRSSBytes)/(1<<20),
				r.Seconds, r.LogicalBytesPerS/(1<<20), r.DataGets, r.MetadataGets, float64(r.PeakRSSBytes)/(1<<20), tm.Seconds, mgr.Seconds)
			writes[i] = append(writes[i], w)
		}
	}
	for i, c := range cells {
		c.Write, c.Read = median(writes[i]), median(reads[i][DurashuffleRanges])
		c.TM, c.Manager = median(reads[i][TransferManager]), median(reads[i][Manager])
		c.Write.Name, c.Read.Name = c.name()+" write", c.name()+" "+readName(DurashuffleRanges)
		c.TM.Name, c.Manager.Name = c.name()+" "+readName(TransferManager), c.name()+" "+readName(Manager)
		c.Write.MemoryBound = int64(cfg.MemoryBound(durashuffle.MemoryLoad{Writers: c.Writers}))
		c.Read.MemoryBound = int64(cfg.MemoryBound(durashuffle.MemoryLoad{Readers: readers}))
		limit := float64(rep.Link.LimitBytesPerS)
		for _, r := range []*Result{&c.Read, &c.TM, &c.Manager} {
			r.LinkFraction = round3(ratio(r.StoredBytesPerS, limit))
		}
		rep.Partitions = append(rep.Partitions, c)
	}
	rep.Targets = partitionTargets(rep.Partitions, e.o.WidePartitions, readers, float64(rep.Link.LimitBytesPerS))
	return rep, nil
}

// readName is how bench partitions names a read of a cell.
func readName(contender string) string {
	if contender == DurashuffleRanges {
		return "range read"
	}
	return contender + " read"
}

// partitionTargets: at the wide partition count against the smallest,
// per writer count, write and read throughput at least 0.8x and stored
// bytes at most 1.05x; at both counts, per writer count of the grid (the
// ones with a cell at the smallest count), the range read's stored bytes
// per second at least 0.85x the link limit (when the link is shaped,
// limit > 0) and at least 1.0x transfermanager's and manager's downloads
// of the same objects (when the row has them); in every row, both
// durashuffle children's peak RSS within their bound; and the request
// budget of the getTargetWriters-writer stage at the wide count.
func partitionTargets(rows []PartitionsRow, wide, readers int, limit float64) []Target {
	if len(rows) == 0 {
		return nil
	}
	base := rows[0].Partitions
	cell := func(p, w int) *PartitionsRow {
		for i := range rows {
			if rows[i].Partitions == p && rows[i].Writers == w {
				return &rows[i]
			}
		}
		return nil
	}
	var ts []Target
	var writers []int
	for _, r := range rows {
		if !slices.Contains(writers, r.Writers) {
			writers = append(writers, r.Writers)
		}
	}
	for _, w := range writers {
		lo, hi := cell(base, w), cell(wide, w)
		if lo == nil || hi == nil || base == wide {
			continue
		}
		name := func(what string) string {
			return fmt.Sprintf("%s, %s: P=%d / P=%d", writersName(w), what, wide, base)
		}
		ts = append(ts,
			atLeast(name("write throughput"), ratio(hi.Write.LogicalBytesPerS, lo.Write.LogicalBytesPerS), 0.8),
			atLeast(name("range-read throughput"), ratio(hi.Read.LogicalBytesPerS, lo.Read.LogicalBytesPerS), 0.8),
			atMost(name("stored bytes"), ratio(float64(hi.Write.StoredBytes), float64(lo.Write.StoredBytes)), 1.05))
	}
	counts := []int{base}
	if wide != base {
		counts = append(counts, wide)
	}
	for _, p := range counts {
		for _, w := range writers {
			c := cell(p, w)
			if c == nil || cell(base, w) == nil {
				continue
			}
			name := func(what string) string {
				return fmt.Sprintf("%s, P=%d: range read / %s", writersName(w), p, what)
			}
			rd := c.Read.StoredBytesPerS
			if limit > 0 {
				ts = append(ts, atLeast(name("link limit"), ratio(rd, limit), 0.85))
			}
			if c.TM.StoredBytesPerS > 0 {
				ts = append(ts, atLeast(name(TransferManager), ratio(rd, c.TM.StoredBytesPerS), 1.0))
			}
			if c.Manager.StoredBytesPerS > 0 {
				ts = append(ts, atLeast(name(Manager), ratio(rd, c.Manager.StoredBytesPerS), 1.0))
			}
		}
	}
	// A child's RSS includes the engine's memory (the write input: the
	// row generators and the batch each producer is handing over), which
	// the bound, being durashuffle's, does not: it is added to the bound.
	worst := func(side func(*PartitionsRow) *Result) (string, float64) {
		name, top := "", 0.0
		for i := range rows {
			r := side(&rows[i])
			if f := ratio(float64(r.PeakRSSBytes), float64(r.MemoryBound+r.InputBytes)); f > top {
				name, top = rows[i].name(), f
			}
		}
		return name, top
	}
	if n, f := worst(func(r *PartitionsRow) *Result { return &r.Write }); n != "" {
		ts = append(ts, atMost("peak RSS / (memory bound + write input), writing child (highest: "+n+")", f, 1.0))
	}
	if n, f := worst(func(r *PartitionsRow) *Result { return &r.Read }); n != "" {
		ts = append(ts, atMost("peak RSS / memory bound, reading child (highest: "+n+")", f, 1.0))
	}
	if c := cell(wide, getTargetWriters); c != nil {
		gets := c.Read.DataGets + c.Read.MetadataGets
		ts = append(ts, Target{Name: fmt.Sprintf("GETs reading the %d x %d stage with %d range readers (data + metadata)", getTargetWriters, wide, readers),
			Want: fmt.Sprintf("<= %d", getTargetMax), Got: float64(gets), Max: getTargetMax, OK: gets <= getTargetMax})
	}
	return ts
}

// readRanges is the range read of bench partitions: j.Readers readers at
// once, each as a task of a downstream stage would: it opens the stage
// itself (Client.OpenStage) and reads one contiguous range of about
// P / Readers partitions with ReadPartitions, every record decoded and
// counted. GETs are counted below the retry layer by key (see getCounter),
// so whatever metadata the reader fetches, and however, is counted.
func readRanges(ctx context.Context, j *Job) (*Result, error) {
	raw, counter, tr, err := openStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	gets := &getCounter{Store: raw}
	client, err := durashuffle.Open(ctx, j.Config, durashuffle.WithStore(gets), durashuffle.WithCounter(counter))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	parts := max(1, j.Data.Partitions)
	ranges := demo.Ranges(int64(parts), min(max(1, j.Readers), parts))
	return readEachRange(ctx, j, counter, gets, ranges, func(ctx context.Context, rg demo.Range, rows, logical *atomic.Int64) error {
		ps := make([]int, 0, rg.Len())
		for p := rg.Lo; p < rg.Hi; p++ {
			ps = append(ps, int(p))
		}
		st, err := client.OpenStage(ctx, j.Query, 0)
		if err != nil {
			return err
		}
		rr, err := st.ReadPartitions(ctx, ps)
		if err != nil {
			return err
		}
		return drainRecords(rr, rows, logical, fmt.Sprintf("partitions %d-%d", rg.Lo, rg.Hi-1))
	})
}

// readEachRange times a range reader: read runs for each of ranges at
// once, adding the rows and logical bytes it reads, and the clock stops
// when every read returned. The result's requests are the counter's
// since the clock started, its GETs those gets counted; reading other
// than the stage's Data.Rows rows is an error.
func readEachRange(ctx context.Context, j *Job, counter *store.Counter, gets *getCounter, ranges []demo.Range,
	read func(ctx context.Context, rg demo.Range, rows, logical *atomic.Int64) error) (*Result, error) {
	res := &Result{Name: j.Name}
	var rows, logical atomic.Int64
	before := counter.Requests()
	start := startClock()
	g, gctx := errgroup.WithContext(ctx)
	for _, rg := range ranges {
		g.Go(func() error { return read(gctx, rg, &rows, &logical) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	elapsed := stopClock(start)
	res.Requests = reqs.Diff(counter.Requests(), before)
	res.Rows, res.LogicalBytes = rows.Load(), logical.Load()
	res.DataGets, res.DataGetBytes = gets.data.Load(), gets.dataBytes.Load()
	res.MetadataGets, res.MetadataBytes = gets.meta.Load(), gets.metaBytes.Load()
	if res.Rows != j.Data.Rows {
		return nil, fmt.Errorf("read %d rows, the stage was written with %d", res.Rows, j.Data.Rows)
	}
	res.finish(elapsed)
	return res, nil
}

// drainRecords reads rr to its end, adding its rows and logical bytes.
func drainRecords(rr *reader.Records, rows, logical *atomic.Int64, what string) error {
	defer rr.Close()
	for rr.Next() {
		rec := rr.RecordBatch()
		rows.Add(rec.NumRows())
		logical.Add(frame.LogicalSize(rec))
	}
	if err := rr.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// getCounter counts a store's GETs, each call one HTTP request (it sits
// below the retry layer, so retries and hedges count), and the bytes their
// bodies carried: data objects (*.arrows) apart from everything else a
// reader fetches (manifests, indexes), which is metadata. Safe for
// concurrent use.
type getCounter struct {
	store.Store
	data, meta           atomic.Int64
	dataBytes, metaBytes atomic.Int64
}

func (s *getCounter) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	n, b := &s.meta, &s.metaBytes
	if strings.HasSuffix(key, ".arrows") {
		n, b = &s.data, &s.dataBytes
	}
	n.Add(1)
	rc, err := s.Store.GetRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	return &countedBody{ReadCloser: rc, n: b}, nil
}

// countedBody adds the bytes read from a body to n.
type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// sortedRuns counts the sorted runs of a worker's objects as they lie in
// storage: a run is a stretch of frames whose partitions do not decrease,
// so a reader of a partition range finds its frames together once per
// run. One object written in partition order is one run.
func sortedRuns(m *manifest.Worker) int {
	fs := slices.Clone(m.Frames)
	slices.SortFunc(fs, func(a, b manifest.Frame) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(a.Offset, b.Offset))
	})
	runs := 0
	for i, f := range fs {
		if i == 0 || f.Object != fs[i-1].Object || f.Partition < fs[i-1].Partition {
			runs++
		}
	}
	return runs
}
