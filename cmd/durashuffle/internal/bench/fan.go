package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/store"
)

// ScenarioFan: W writers (a map stage's tasks) each write k x their
// coalesce_budget of rows into FanPartitions partitions over the link,
// then R readers (the reduce stage's tasks) each read a contiguous range
// of P/R partitions from every writer, in four layouts: durashuffle with
// its local spill on and off, Druid's one object per writer and
// partition, and Spark's sort shuffle (one partition-sorted map file per
// writer) uploaded with the AWS transfermanager.
const ScenarioFan = "fan"

// The contenders of bench fan besides Durashuffle (spill on).
const (
	// FanSpillOff is durashuffle's writer with spill off: every time its
	// coalesce_budget fills, a sorted run goes to S3 (the multi-run
	// layout).
	FanSpillOff = "spill-off"
	// Druid is Druid's durable-storage layout: one object per writer and
	// partition, each an Arrow IPC stream, read with one GET per object.
	Druid = "druid"
	// MapFile is Spark's sort shuffle with the map output on S3: one
	// local partition-sorted file per writer, uploaded whole, read with
	// ranged GETs of each reader's partition range.
	MapFile = "map-file"
)

// fanContenders is bench fan's contenders, in the order of its table.
var fanContenders = []string{Durashuffle, FanSpillOff, Druid, MapFile}

// FanShape is one shape of bench fan: Writers map tasks write the stage,
// then Readers reduce tasks read it.
type FanShape struct {
	Writers int `json:"writers"`
	Readers int `json:"readers"`
}

func (s FanShape) String() string { return fmt.Sprintf("%dx%d", s.Writers, s.Readers) }

// ParseFanShapes parses "8x8,32x8": writers x readers, comma-separated.
func ParseFanShapes(s string) ([]FanShape, error) {
	var out []FanShape
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		w, r, ok := strings.Cut(f, "x")
		nw, errw := strconv.Atoi(w)
		nr, errr := strconv.Atoi(r)
		if !ok || errw != nil || errr != nil || nw < 1 || nr < 1 {
			return nil, fmt.Errorf("shape %q: want WRITERSxREADERS with both at least 1, such as 8x8", f)
		}
		out = append(out, FanShape{Writers: nw, Readers: nr})
	}
	return out, nil
}

// FanJob is what a bench fan child needs besides its Job.
type FanJob struct {
	// Dir is the run's local directory: durashuffle's spill_dir, the
	// druid and map-file writers' run files and the map-file index,
	// which the map-file readers find there (Spark's map output
	// tracker's part: the reducers know each map file's offsets).
	Dir string `json:"dir"`
}

// FanRow is one contender in one cell of bench fan: the medians of its
// writes and of its reads of what it wrote.
type FanRow struct {
	Writers    int `json:"writers"`
	Readers    int `json:"readers"`
	Partitions int `json:"partitions"`
	// Multiple is each writer's logical output in coalesce_budgets.
	Multiple  int    `json:"multiple"`
	Contender string `json:"contender"`
	// NotRun says why the contender was not run (a configuration key
	// this build of durashuffle does not have); Write and Read are then
	// zero.
	NotRun string `json:"not_run,omitempty"`
	Write  Result `json:"write"`
	Read   Result `json:"read"`
}

func (r FanRow) shape() FanShape { return FanShape{Writers: r.Writers, Readers: r.Readers} }

func (r FanRow) cellName() string { return fmt.Sprintf("%s %dx", r.shape(), r.Multiple) }

// putRequests is the PUT-class requests of a write: single puts, and
// the create, parts and completion of multipart uploads.
func putRequests(r Result) int64 {
	return r.Requests["PutObject"] + r.Requests["CreateMultipartUpload"] + r.Requests["UploadPart"] + r.Requests["CompleteMultipartUpload"]
}

// getRequests is the GETs of a read, data and metadata.
func getRequests(r Result) int64 { return r.Requests["GetObject"] }

// meanGetBytes is what a read's GETs carried on average.
func meanGetBytes(r Result) float64 {
	return ratio(float64(r.DataGetBytes+r.MetadataBytes), float64(r.DataGets+r.MetadataGets))
}

// fanConfigs is each contender's configuration: durashuffle with its
// spill on, spill-off with it off. notRun is always empty here; a row
// that could not run says why in FanRow.NotRun.
func fanConfigs(cfg durashuffle.Config) (map[string]durashuffle.Config, map[string]string, error) {
	cfgs, notRun := map[string]durashuffle.Config{}, map[string]string{}
	for _, name := range fanContenders {
		c := cfg
		switch name {
		case Durashuffle:
			c.Write.Spill = "on"
		case FanSpillOff:
			c.Write.Spill = "off"
		}
		cfgs[name] = c
	}
	return cfgs, notRun, nil
}

// fanCell is one shape at one output size.
type fanCell struct {
	FanShape
	multiple int
}

func (c fanCell) name() string { return fmt.Sprintf("%s %dx", c.FanShape, c.multiple) }

// runFan runs every contender in every cell (shape x output multiple),
// rounds alternated as the other scenarios do: in each round the cells
// and, within a cell, the contenders go in an order rotated from the
// round before. Each contender writes its own layout and then reads it
// back; its objects and local files are removed before the next.
func (e *Env) runFan(ctx context.Context) (*Report, error) {
	cfg := e.o.Config
	if e.o.FanCoalesceBudget > 0 {
		cfg.Write.CoalesceBudget = e.o.FanCoalesceBudget
	}
	parts := e.o.FanPartitions
	if parts < 1 || len(e.o.FanShapes) == 0 || len(e.o.FanMultiples) == 0 {
		return nil, fmt.Errorf("fan: partitions %d, shapes %v, output multiples %v: want at least one of each", parts, e.o.FanShapes, e.o.FanMultiples)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fan: %w", err)
	}
	cfgs, notRun, err := fanConfigs(cfg)
	if err != nil {
		return nil, err
	}
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	d := e.o.Data
	// One producer per writer: a map task feeds its writer from one
	// thread, and the shapes bring the concurrency.
	d.Input, d.WriteRows, d.Producers, d.Partitions = InputFresh, 8192, 1, parts
	rep := &Report{Scenario: ScenarioFan, Link: e.Link.Info(cfg.Write.UploadConcurrency), Setup: e.setup(d, cfg, e.storeName(), spl)}
	rep.Setup.Rows, rep.Setup.Workers = 0, 0
	rep.Setup.ReadAhead, rep.Setup.ReadRangeBytes = cfg.Read.Ahead, int64(cfg.Read.RangeBytes)
	var cells []fanCell
	for _, s := range e.o.FanShapes {
		for _, m := range e.o.FanMultiples {
			cells = append(cells, fanCell{s, m})
		}
	}
	var live []string
	for _, name := range fanContenders {
		if msg, ok := notRun[name]; ok {
			e.logf("fan: %s not run: %s", name, msg)
			continue
		}
		live = append(live, name)
	}
	e.logf("fan: shapes %v (writers x readers), each writer %v x coalesce_budget %s logical, %d partitions; %s",
		e.o.FanShapes, e.o.FanMultiples, cfg.Write.CoalesceBudget, parts, strings.Join(live, ", "))
	if err := e.probe(ctx, rep, cfg); err != nil {
		return nil, err
	}
	type key struct {
		cell      int
		contender string
	}
	writes, reads := map[key][]*Result{}, map[key][]*Result{}
	rounds := max(1, e.o.Rounds)
	runs := 2 * rounds * len(cells) * len(live)
	run := 0
	for round := range rounds {
		for k := range cells {
			i := (k + round) % len(cells)
			c := cells[i]
			dd := d
			dd.Workers = c.Writers
			dd.Rows = int64(c.Writers) * int64(float64(c.multiple)*float64(cfg.Write.CoalesceBudget)/bytesPerRow)
			for n := range live {
				name := live[(n+round)%len(live)]
				w, r, err := e.fanRun(ctx, c, name, cfgs[name], dd, &Round{Round: round + 1, Rounds: rounds, Run: run + 1, Runs: runs})
				run += 2
				if err != nil {
					return nil, fmt.Errorf("round %d, %s %s: %w", round+1, c.name(), name, err)
				}
				e.logf("  round %d %-10s %-11s write %6.2f s, %6d PUTs, %7.1f MiB stored in %5d objects, rss %5.0f MiB, disk %6.1f MiB; read %6.2f s, %6d GETs of %6.1f KiB",
					round+1, c.name(), name, w.Seconds, putRequests(*w), float64(w.StoredBytes)/(1<<20), w.Objects, float64(w.PeakRSSBytes)/(1<<20),
					float64(w.LocalDiskBytes)/(1<<20), r.Seconds, getRequests(*r), meanGetBytes(*r)/1024)
				writes[key{i, name}] = append(writes[key{i, name}], w)
				reads[key{i, name}] = append(reads[key{i, name}], r)
			}
		}
	}
	for i, c := range cells {
		for _, name := range fanContenders {
			row := FanRow{Writers: c.Writers, Readers: c.Readers, Partitions: parts, Multiple: c.multiple, Contender: name, NotRun: notRun[name]}
			if row.NotRun == "" {
				row.Write, row.Read = median(writes[key{i, name}]), median(reads[key{i, name}])
				row.Write.Name, row.Read.Name = c.name()+" "+name+" write", c.name()+" "+name+" read"
			}
			rep.Fan = append(rep.Fan, row)
		}
	}
	rep.Targets = fanTargets(rep.Fan)
	return rep, nil
}

// fanRun runs one contender's write and then its read of one cell, each
// in a child, in a local directory of their own, and removes what they
// left: the objects under the query, and the directory.
func (e *Env) fanRun(ctx context.Context, c fanCell, name string, cfg durashuffle.Config, d Data, rd *Round) (w, r *Result, err error) {
	dir, err := os.MkdirTemp(e.workDir, "fan-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	if name == Durashuffle {
		cfg.Write.SpillDir = dir
	}
	q := e.query("fan", c.FanShape.String(), strconv.Itoa(c.multiple), name, strconv.Itoa(rd.Round))
	defer e.cleanup(ctx, q)
	wj := e.job("write", name, q, cfg, d)
	wj.Fan = &FanJob{Dir: dir}
	wr := *rd
	wr.Name = c.name() + " " + name + " write"
	wj.Round = &wr
	if w, err = e.o.Runner.Run(ctx, wj); err != nil {
		return nil, nil, err
	}
	// What the store holds is what the table says was stored, whatever
	// the child counted.
	if w.Objects, w.StoredBytes, err = e.dataObjects(ctx, q); err != nil {
		return nil, nil, err
	}
	w.finish(secondsDuration(w.Seconds))
	rj := e.job("read", name, q, cfg, d)
	rj.Fan = &FanJob{Dir: dir}
	rj.Readers = c.Readers
	rr := *rd
	rr.Name, rr.Run = c.name()+" "+name+" read", rd.Run+1
	rj.Round = &rr
	if r, err = e.o.Runner.Run(ctx, rj); err != nil {
		return nil, nil, err
	}
	// The stage's stored bytes are what the read moved; the GETs'
	// bodies are counted apart (DataGetBytes, MetadataBytes).
	r.StoredBytes, r.Objects = w.StoredBytes, w.Objects
	r.finish(secondsDuration(r.Seconds))
	return w, r, nil
}

// dataObjects counts the data objects (*.arrows) under a query and
// their bytes, as the store lists them.
func (e *Env) dataObjects(ctx context.Context, query string) (int, int64, error) {
	prefix := strings.Trim(e.o.Config.Store.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	objs, _, err := e.direct.List(ctx, prefix+query+"/", "")
	if err != nil {
		return 0, 0, fmt.Errorf("list %s: %w", query, err)
	}
	n, size := 0, int64(0)
	for _, o := range objs {
		if strings.HasSuffix(o.Key, ".arrows") {
			n++
			size += o.Size
		}
	}
	return n, size, nil
}

// fanTargets: per shape, durashuffle's GETs per reader and stored bytes
// per logical byte at the largest output against the smallest; per
// cell, durashuffle's read time against druid's and map-file's and its
// write time against map-file's and spill-off's. A target whose
// contender did not run is missed, saying why.
func fanTargets(rows []FanRow) []Target {
	find := func(s FanShape, m int, name string) *FanRow {
		for i := range rows {
			if rows[i].shape() == s && rows[i].Multiple == m && rows[i].Contender == name {
				return &rows[i]
			}
		}
		return nil
	}
	var shapes []FanShape
	lo, hi := map[FanShape]int{}, map[FanShape]int{}
	var ts []Target
	for _, r := range rows {
		s := r.shape()
		if _, ok := lo[s]; !ok {
			shapes = append(shapes, s)
			lo[s], hi[s] = r.Multiple, r.Multiple
		}
		lo[s], hi[s] = min(lo[s], r.Multiple), max(hi[s], r.Multiple)
	}
	// notRun is the target named, missed, when a row it needs did not run.
	notRun := func(name, want string, rs ...*FanRow) *Target {
		for _, r := range rs {
			if r == nil {
				return &Target{Name: name + " (no such row)", Want: want}
			}
			if r.NotRun != "" {
				return &Target{Name: fmt.Sprintf("%s (%s not run: %s)", name, r.Contender, r.NotRun), Want: want}
			}
		}
		return nil
	}
	add := func(t Target, rs ...*FanRow) {
		if nr := notRun(t.Name, t.Want, rs...); nr != nil {
			t = *nr
		}
		ts = append(ts, t)
	}
	for _, s := range shapes {
		a, b := find(s, lo[s], Durashuffle), find(s, hi[s], Durashuffle)
		if lo[s] != hi[s] {
			perReader := func(r *FanRow) float64 {
				if r == nil {
					return 0
				}
				return float64(getRequests(r.Read)) / float64(r.Readers)
			}
			perLogical := func(r *FanRow) float64 {
				if r == nil {
					return 0
				}
				return ratio(float64(r.Write.StoredBytes), float64(r.Write.LogicalBytes))
			}
			add(atMost(fmt.Sprintf("%s durashuffle: GETs per reader, %dx / %dx", s, hi[s], lo[s]), ratio(perReader(b), perReader(a)), 1.10), a, b)
			add(atMost(fmt.Sprintf("%s durashuffle: stored bytes per logical byte, %dx / %dx", s, hi[s], lo[s]), ratio(perLogical(b), perLogical(a)), 1.03), a, b)
		}
		for _, r := range rows {
			if r.shape() != s || r.Contender != Durashuffle {
				continue
			}
			m := r.Multiple
			ds := find(s, m, Durashuffle)
			for _, c := range []struct {
				other, what string
				want        float64
			}{
				{Druid, "read", 0.5}, {MapFile, "read", 1.0}, {MapFile, "write", 1.0}, {FanSpillOff, "write", 1.2},
			} {
				o := find(s, m, c.other)
				got := 0.0
				if o != nil {
					if c.what == "read" {
						got = ratio(ds.Read.Seconds, o.Read.Seconds)
					} else {
						got = ratio(ds.Write.Seconds, o.Write.Seconds)
					}
				}
				add(atMost(fmt.Sprintf("%s %dx: durashuffle %s time / %s", s, m, c.what, c.other), got, c.want), ds, o)
			}
		}
	}
	return ts
}

// runFanJob runs a bench fan child's job.
func runFanJob(ctx context.Context, j *Job) (*Result, error) {
	switch {
	case j.Kind == "write" && (j.Name == Durashuffle || j.Name == FanSpillOff):
		return writeFanDurashuffle(ctx, j)
	case j.Kind == "write" && j.Name == Druid:
		return writeDruid(ctx, j)
	case j.Kind == "write" && j.Name == MapFile:
		return writeMapFile(ctx, j)
	case j.Kind == "read" && (j.Name == Durashuffle || j.Name == FanSpillOff):
		return readRanges(ctx, j)
	case j.Kind == "read" && j.Name == Druid:
		return readDruid(ctx, j)
	case j.Kind == "read" && j.Name == MapFile:
		return readMapFile(ctx, j)
	}
	return nil, fmt.Errorf("unknown fan job %s/%s", j.Kind, j.Name)
}

// writeFanDurashuffle is durashuffle's write path (writeWith), with the
// local directory, its spill_dir, sampled for its peak size.
func writeFanDurashuffle(ctx context.Context, j *Job) (*Result, error) {
	raw, counter, tr, err := openStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	stop := sampleDir(j.Fan.Dir, 10*time.Millisecond)
	res, err := writeWith(ctx, j, raw, counter)
	peak := stop()
	if err != nil {
		return nil, err
	}
	res.LocalDiskBytes = peak
	return res, nil
}

// sampleDir looks at the size of the files under dir every interval
// until stop, which returns the largest total seen (one last look
// included). Files written and removed between two looks are missed:
// for a writer's own files, diskMeter counts exactly.
func sampleDir(dir string, every time.Duration) (stop func() int64) {
	var peak int64
	look := func() {
		var total int64
		filepath.WalkDir(dir, func(_ string, de os.DirEntry, err error) error {
			if err == nil && de.Type().IsRegular() {
				if fi, err := de.Info(); err == nil {
					total += fi.Size()
				}
			}
			return nil
		})
		peak = max(peak, total)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				look()
			}
		}
	}()
	return func() int64 {
		close(quit)
		<-done
		look()
		return peak
	}
}

// diskMeter counts the bytes a contender has on local disk and their
// high-water mark. Safe for concurrent use.
type diskMeter struct {
	mu        sync.Mutex
	now, peak int64
}

func (m *diskMeter) add(n int64) {
	m.mu.Lock()
	m.now += n
	m.peak = max(m.peak, m.now)
	m.mu.Unlock()
}

func (m *diskMeter) high() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// retryPolicy is the retry layer of the configuration, for the
// contenders that use durashuffle's store without its client.
func retryPolicy(cfg durashuffle.Config) retry.Policy {
	return retry.Policy{MaxAttempts: cfg.Store.RetryMaxAttempts, BaseDelay: cfg.Store.RetryBaseDelay.D(),
		MaxDelay: cfg.Store.RetryMaxDelay.D(), Timeout: cfg.Store.RequestTimeout.D()}
}

// fanReadStore is a reader's store: the job's S3 store on the link,
// GETs counted by getCounter below the retry layer (every attempt is a
// request), requests by the counter.
func fanReadStore(ctx context.Context, j *Job) (store.Store, *getCounter, *store.Counter, func(), error) {
	raw, counter, tr, err := openStore(ctx, j)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	gets := &getCounter{Store: raw}
	return retry.Wrap(gets, retryPolicy(j.Config), counter), gets, counter, func() { closeIdle(tr) }, nil
}

// writeStore is a writer's store without durashuffle's client: the
// job's store on the link, data requests timed by the returned clock,
// retried by the configuration's retry layer, requests counted by the
// counter. done closes the link's idle connections.
func writeStore(ctx context.Context, j *Job) (store.Store, *store.Counter, *dataClock, func(), error) {
	raw, counter, tr, err := openStore(ctx, j)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	clock := &dataClock{}
	return retry.Wrap(clockedStore{raw, clock}, retryPolicy(j.Config), counter), counter, clock, func() { closeIdle(tr) }, nil
}

// writeSorted times the writers that sort on local disk (Druid's and
// the map file's): Data.Workers writers at once, each sorting its rows
// by partition in a runSorter under Fan.Dir (with coalesce_budget bytes
// of memory), then handing the closed sorter to upload, which stores it
// as perWriter objects and returns the bytes it stored. The result's
// requests are the counter's since the clock started.
func writeSorted(ctx context.Context, j *Job, counter *store.Counter, clock *dataClock, perWriter int,
	upload func(ctx context.Context, w int, s *runSorter, disk *diskMeter) (int64, error)) (*Result, error) {
	res := &Result{Name: j.Name}
	var err error
	if res.InputBytes, err = prepareInput(j); err != nil {
		return nil, err
	}
	disk := &diskMeter{}
	workers, parts := max(1, j.Data.Workers), j.Data.Partitions
	var rows, logical, stored atomic.Int64
	before := counter.Requests()
	start := startClock()
	clock.start = start
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			s, err := newRunSorter(j.Fan.Dir, "w"+strconv.Itoa(w), parts, int64(j.Config.Write.CoalesceBudget), disk)
			if err != nil {
				return err
			}
			defer s.remove()
			n, err := feed(gctx, j.Data, w, s.Write)
			if err != nil {
				return fmt.Errorf("writer %d: %w", w, err)
			}
			if err := s.Close(); err != nil {
				return fmt.Errorf("writer %d: %w", w, err)
			}
			logical.Add(n)
			rows.Add(s.rows)
			size, err := upload(gctx, w, s, disk)
			if err != nil {
				return err
			}
			stored.Add(size)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	elapsed := stopClock(start)
	res.Requests = reqs.Diff(counter.Requests(), before)
	res.Rows, res.LogicalBytes, res.StoredBytes = rows.Load(), logical.Load(), stored.Load()
	res.Objects = workers * perWriter
	res.LocalDiskBytes = disk.high()
	res.finish(elapsed)
	clock.fill(res)
	return res, nil
}

// fanKey is the key of a druid or map-file object under the job's query:
// {prefix}/{query}/{layout}/{name}.arrows.
func fanKey(j *Job, layout, name string) string {
	prefix := strings.Trim(j.Config.Store.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return prefix + j.Query + "/" + layout + "/" + name + ".arrows"
}
