package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/durashuffle/durashuffle"
)

func (e *Env) data(stored int64, ratio float64) Data {
	d := e.o.Data
	d.Rows = e.rowsFor(stored, ratio)
	return d
}

// encryptionKey returns a fresh root key, in hex, for the encrypted
// contenders: a bench's stages are its own, and so are their keys.
func (e *Env) encryptionKey() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return hex.EncodeToString(k)
}

// WriteContenders are write's contenders, in the order of its report:
// durashuffle's, then the baselines of the store in use (Baselines).
var WriteContenders = []string{Durashuffle, DurashuffleEncrypted, DurashuffleAuto, DurashuffleSpillOff, DurashuffleEncodeOnly, Sequential, TransferManager, Manager, AzBlob, GCSClient}

// encodeFiles writes the data objects durashuffle's writer produces for
// d and cfg to local files (untimed): what transfermanager and manager
// upload.
func (e *Env) encodeFiles(ctx context.Context, cfg durashuffle.Config, d Data) ([]string, *Result, error) {
	dir := filepath.Join(e.workDir, "encoded")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	prep := e.job("encode-files", Durashuffle, e.query("encoded"), cfg, d)
	prep.Files = []string{dir}
	enc, err := e.o.Runner.Run(ctx, prep)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the data set to files: %w", err)
	}
	return enc.Keys, enc, nil
}

// runWrite: durashuffle against sequential and transfermanager. Over a
// shaped link, durashuffle also runs with spill off, and on the null
// store (durashuffle-encode-only): durashuffle's CPU less that one's is
// what the upload costs it. The durashuffle writers' CPU is divided by
// stage (see stageRules).
func (e *Env) runWrite(ctx context.Context) (*Report, error) {
	cfg := e.o.Config
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	d := e.data(e.o.Stored, spl)
	rep := &Report{Scenario: ScenarioWrite, Link: e.Link.Info(cfg.Write.UploadConcurrency), Setup: e.setup(d, cfg, e.storeName(), spl)}
	e.logf("write: %d rows (~%s stored) in %d partitions; %s chunks, concurrency %d", d.Rows, sizeString(e.o.Stored), d.Partitions, cfg.Write.ChunkSize, cfg.Write.UploadConcurrency)
	if err := e.probe(ctx, rep, cfg); err != nil {
		return nil, err
	}

	kind := StoreKind(cfg)
	names := slices.DeleteFunc(slices.Clone(WriteContenders), func(n string) bool {
		return isBaseline(n) && !slices.Contains(Baselines[kind], n)
	})
	if e.Link.Addr == "" {
		// Unshaped, CPU-bound: what auto and encryption cost next to
		// lz4; the baselines say nothing more there.
		names = []string{Durashuffle, DurashuffleEncrypted, DurashuffleAuto}
	}
	if only := e.o.WriteContenders; len(only) > 0 {
		names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(only, n) })
		if len(names) == 0 {
			return nil, fmt.Errorf("write: none of the contenders %v runs here (unshaped, only %s, %s and %s run)", only, Durashuffle, DurashuffleEncrypted, DurashuffleAuto)
		}
	}
	// ran says whether every contender named ran: a target of one that
	// did not is left out, not reported missed.
	ran := func(ns ...string) bool {
		for _, n := range ns {
			if !slices.Contains(names, n) {
				return false
			}
		}
		return true
	}

	// The already-encoded bytes that transfermanager uploads: the data
	// objects durashuffle's writer produces for the same rows and config.
	var files []string
	var encoded *Result
	if slices.ContainsFunc(names, isBaseline) {
		files, encoded, err = e.encodeFiles(ctx, cfg, d)
		if err != nil {
			return nil, err
		}
		defer func() {
			for _, f := range files {
				os.Remove(f)
			}
		}()
	}

	rep.Results, err = e.rounds(ctx, names, func(name string, round int) *Job {
		q := e.query("write", name, strconv.Itoa(round))
		c := cfg
		switch name {
		case DurashuffleAuto:
			c.Write.Compression = "auto"
		case DurashuffleSpillOff:
			c.Write.Spill = "off"
		case DurashuffleEncrypted:
			c.Store.EncryptionKey = e.encryptionKey()
		}
		j := e.job("write", name, q, c, d)
		switch {
		case isBaseline(name):
			j.Files = files
			for i := range files {
				j.Keys = append(j.Keys, path.Join(cfg.Store.Prefix, q, fmt.Sprintf("data-%d.arrows", i)))
			}
		case name == DurashuffleEncodeOnly:
			j.NullStore = true
		}
		if strings.HasPrefix(name, Durashuffle) {
			e.staged(j)
		}
		return j
	}, func(name string, r *Result) {
		if isBaseline(name) {
			r.LogicalBytes = encoded.LogicalBytes
			r.Rows = encoded.Rows
			r.finish(secondsDuration(r.Seconds))
		}
	})
	if err != nil {
		return nil, err
	}
	limit := float64(rep.Link.LimitBytesPerS)
	ds, auto := find(rep.Results, Durashuffle), find(rep.Results, DurashuffleAuto)
	for i := range rep.Results {
		if r := &rep.Results[i]; r.Name != DurashuffleEncodeOnly { // not over the link
			r.LinkFraction = round3(ratio(r.StoredBytesPerS, limit))
			r.UploadLinkFraction = round3(ratio(r.DataBytesPerS, limit))
			if after := r.Seconds - r.InputSeconds; r.InputSeconds > 0 && after > 0 {
				r.AfterInputLinkFraction = round3(ratio(float64(r.StoredBytes)/after, limit))
			}
		}
	}
	// target adds t when every contender it compares ran.
	target := func(t Target, contenders ...string) {
		if ran(contenders...) {
			rep.Targets = append(rep.Targets, t)
		}
	}
	// The checksums' share of the writer's CPU.
	if w := ds.writerCPU(); w > 0 {
		target(atMost("durashuffle CRC32C / writer CPU", ds.CPUByStage[StageCRC32C]/w, 0.03), Durashuffle)
	}
	enc := find(rep.Results, DurashuffleEncrypted)
	target(atMost("durashuffle-encrypted time / durashuffle time", ratio(enc.Seconds, ds.Seconds), 1.05), Durashuffle, DurashuffleEncrypted)
	target(atMost("durashuffle-encrypted CPU / durashuffle CPU", ratio(enc.CPUSeconds, ds.CPUSeconds), 1.05), Durashuffle, DurashuffleEncrypted)
	if e.Link.Addr == "" {
		target(atMost("durashuffle-auto time / durashuffle (lz4) time, unshaped", ratio(auto.Seconds, ds.Seconds), 1.05), Durashuffle, DurashuffleAuto)
		return rep, nil
	}
	off, encOnly := find(rep.Results, DurashuffleSpillOff), find(rep.Results, DurashuffleEncodeOnly)
	seq, mgr := find(rep.Results, Sequential), find(rep.Results, Manager)
	if limit > 0 {
		target(atLeast("durashuffle / link limit", ratio(ds.StoredBytesPerS, limit), 0.95), Durashuffle)
		target(atLeast("durashuffle-auto logical / link limit", ratio(auto.LogicalBytesPerS, limit), 2.0), DurashuffleAuto)
		target(atLeast("durashuffle-spill-off / link limit", ratio(off.StoredBytesPerS, limit), 0.95), DurashuffleSpillOff)
		// A spilling writer uploads from Commit on: its stored bytes
		// over the time after its input, and over its upload phase
		// (first part byte to last), against the link.
		target(atLeast("durashuffle stored / (time after input) / link limit", ds.AfterInputLinkFraction, 0.95), Durashuffle)
		target(atLeast("durashuffle upload phase / link limit", ds.UploadLinkFraction, 0.95), Durashuffle)
	}
	for _, b := range Baselines[kind] {
		target(atLeast("durashuffle / "+b, ratio(ds.StoredBytesPerS, find(rep.Results, b).StoredBytesPerS), 1.0), Durashuffle, b)
	}
	target(atLeast("durashuffle / sequential", ratio(ds.StoredBytesPerS, seq.StoredBytesPerS), 6.0), Durashuffle, Sequential)
	for _, b := range Baselines[kind] {
		target(atLeast("durashuffle-spill-off / "+b, ratio(off.StoredBytesPerS, find(rep.Results, b).StoredBytesPerS), 1.0), DurashuffleSpillOff, b)
	}
	// What the upload costs durashuffle (its CPU less the same write's on
	// the null store) against all that manager spends uploading the same
	// bytes, each per GiB stored.
	if m := cpuPerGiB(mgr.CPUSeconds, mgr.StoredBytes); m > 0 && ds.StoredBytes > 0 {
		upload := (ds.CPUSeconds - encOnly.CPUSeconds) / (float64(ds.StoredBytes) / (1 << 30))
		target(atMost("durashuffle upload CPU per GiB stored / manager's", upload/m, 1.5), Durashuffle, DurashuffleEncodeOnly, Manager)
		// The same from durashuffle's own profile: the stages only the
		// upload runs (TLS, HTTP and the SDK, the checksums), free of the
		// noise of two children's totals and of what spilling adds.
		sent := ds.CPUByStage[StageTLS] + ds.CPUByStage[StageHTTP] + ds.CPUByStage[StageCRC32C]
		target(atMost("durashuffle tls+http+crc32c CPU per GiB stored / manager's", cpuPerGiB(sent, ds.StoredBytes)/m, 1.5), Durashuffle, Manager)
	}
	return rep, nil
}

// runRead: durashuffle reading every partition against transfermanager
// downloading the same objects whole.
func (e *Env) runRead(ctx context.Context) (*Report, error) {
	cfg := e.o.Config
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	d := e.data(e.o.Stored, spl)
	rep := &Report{Scenario: ScenarioRead, Link: e.Link.Info(cfg.Write.UploadConcurrency), Setup: e.setup(d, cfg, e.storeName(), spl)}
	rep.Setup.Readers = e.o.Readers
	// The stage to read, written straight to the endpoint (not timed).
	q := e.query("read")
	prep := e.job("write", Durashuffle, q, cfg, d)
	prep.Dial = ""
	src, err := e.o.Runner.Run(ctx, prep)
	if err != nil {
		return nil, fmt.Errorf("write the stage to read: %w", err)
	}
	defer e.cleanup(ctx, q)
	e.logf("read: %d rows, %s stored in %d objects, %d frames", src.Rows, sizeString(src.StoredBytes), src.Objects, src.Frames)
	if err := e.probe(ctx, rep, cfg); err != nil {
		return nil, err
	}
	// The same rows written sealed, for durashuffle-encrypted to read
	// with the key.
	qe, ke := e.query("read-encrypted"), e.encryptionKey()
	prepEnc := e.job("write", DurashuffleEncrypted, qe, cfg, d)
	prepEnc.Config.Store.EncryptionKey, prepEnc.Dial = ke, ""
	if _, err := e.o.Runner.Run(ctx, prepEnc); err != nil {
		return nil, fmt.Errorf("write the encrypted stage to read: %w", err)
	}
	defer e.cleanup(ctx, qe)
	kind := StoreKind(cfg)
	names := append([]string{Durashuffle, DurashuffleEncrypted, DurashuffleByPartition}, Baselines[kind]...)
	rep.Results, err = e.rounds(ctx, names, func(name string, _ int) *Job {
		c, query := cfg, q
		if name == Durashuffle || name == DurashuffleEncrypted {
			// One stream in storage order: as many GETs in flight as
			// transfermanager's concurrency.
			c.Read.Ahead = cfg.Write.UploadConcurrency
		}
		if name == DurashuffleEncrypted {
			c.Store.EncryptionKey, query = ke, qe
		}
		j := e.job("read", name, query, c, d)
		j.Readers = e.o.Readers
		j.Keys = src.Keys
		return j
	}, func(name string, r *Result) {
		if isBaseline(name) {
			r.LogicalBytes = src.LogicalBytes
			r.Rows = src.Rows
			r.finish(secondsDuration(r.Seconds))
		}
	})
	if err != nil {
		return nil, err
	}
	limit := float64(rep.Link.LimitBytesPerS)
	for i := range rep.Results {
		rep.Results[i].LinkFraction = round3(ratio(rep.Results[i].StoredBytesPerS, limit))
	}
	ds := find(rep.Results, Durashuffle)
	enc := find(rep.Results, DurashuffleEncrypted)
	rep.Targets = append(rep.Targets,
		atMost("durashuffle-encrypted time / durashuffle time", ratio(enc.Seconds, ds.Seconds), 1.05),
		atMost("durashuffle-encrypted CPU / durashuffle CPU", ratio(enc.CPUSeconds, ds.CPUSeconds), 1.05))
	if ds.RangedGets > 0 {
		ds.MeanGetBytes = float64(ds.StoredBytes) / float64(ds.RangedGets)
		if bw := float64(rep.Link.ConnBandwidthBytes); bw > 0 {
			ds.GetCeiling = round3(ds.MeanGetBytes / (ds.MeanGetBytes + rep.Link.LatencyMS/1000*bw))
		}
	}
	if limit > 0 {
		rep.Targets = append(rep.Targets, atLeast("durashuffle / link limit", ratio(ds.StoredBytesPerS, limit), 0.95))
	}
	for _, b := range Baselines[kind] {
		rep.Targets = append(rep.Targets, atLeast("durashuffle / "+b, ratio(ds.StoredBytesPerS, find(rep.Results, b).StoredBytesPerS), 1.0))
	}
	rep.Targets = append(rep.Targets,
		Target{Name: "metadata GETs per stage (manifest, index)", Want: "= 2", Got: float64(ds.ManifestGets), Min: 2, Max: 2, OK: ds.ManifestGets == 2})
	return rep, nil
}

// runSmallBatches: the same rows fed as small and as large batches.
func (e *Env) runSmallBatches(ctx context.Context) (*Report, error) {
	cfg := e.o.Config
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	d := e.data(e.o.Stored, spl)
	rows := e.o.SmallRows
	if len(rows) != 2 {
		return nil, fmt.Errorf("small-batches wants two batch sizes, got %v", rows)
	}
	d.PoolRows = max(d.PoolRows, rows[1])
	st := "null store (uploads discarded): the CPU side alone"
	link := LinkInfo{}
	if e.o.SmallOverLink {
		st = e.storeName()
		link = e.Link.Info(cfg.Write.UploadConcurrency)
	}
	rep := &Report{Scenario: ScenarioSmallBatches, Link: link, Setup: e.setup(d, cfg, st, spl)}
	e.logf("small-batches: %d rows as %d-row and %d-row Writes, %s", d.Rows, rows[0], rows[1], st)
	names := []string{fmt.Sprintf("%d-rows", rows[0]), fmt.Sprintf("%d-rows", rows[1])}
	rep.Results, err = e.rounds(ctx, names, func(name string, round int) *Job {
		dd := d
		dd.WriteRows = rows[0]
		if name == names[1] {
			dd.WriteRows = rows[1]
		}
		j := e.job("write", Durashuffle, e.query("small", name, strconv.Itoa(round)), cfg, dd)
		j.NullStore = !e.o.SmallOverLink
		return j
	}, func(name string, r *Result) {
		r.WriteRows = rows[0]
		if name == names[1] {
			r.WriteRows = rows[1]
		}
	})
	if err != nil {
		return nil, err
	}
	small, large := &rep.Results[0], &rep.Results[1]
	rep.Targets = []Target{
		atMost(names[0]+" time / "+names[1]+" time", ratio(small.Seconds, large.Seconds), 1.10),
		atMost(names[0]+" stored / "+names[1]+" stored", ratio(float64(small.StoredBytes), float64(large.StoredBytes)), 1.02),
	}
	return rep, nil
}

// runEncode: the CPU side alone (null store) with 1 and N writer
// goroutines; N goroutines call Write and N encode.
func (e *Env) runEncode(ctx context.Context) (*Report, error) {
	cfg := e.o.Config
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	d := e.data(e.o.Stored, spl)
	rep := &Report{Scenario: ScenarioEncode, Setup: e.setup(d, cfg, "null store (uploads discarded)", spl)}
	var names []string
	for _, n := range e.o.Writers {
		names = append(names, writersName(n))
	}
	e.logf("encode: %d rows, writers %v, null store", d.Rows, e.o.Writers)
	rep.Results, err = e.rounds(ctx, names, func(name string, round int) *Job {
		n := e.o.Writers[indexOf(names, name)]
		c := cfg
		c.Write.EncodeConcurrency = n
		dd := d
		dd.Producers = n
		j := e.job("write", Durashuffle, e.query("encode", strconv.Itoa(n), strconv.Itoa(round)), c, dd)
		j.NullStore = true
		return e.staged(j)
	}, func(name string, r *Result) {
		r.EncodeWriters = e.o.Writers[indexOf(names, name)]
	})
	if err != nil {
		return nil, err
	}
	if len(rep.Results) >= 2 {
		one, many := rep.Results[0], rep.Results[len(rep.Results)-1]
		want := 1.7 * float64(many.EncodeWriters) / 2
		rep.Targets = append(rep.Targets, atLeast(fmt.Sprintf("%s / %s throughput", names[len(names)-1], names[0]),
			ratio(many.LogicalBytesPerS, one.LogicalBytesPerS), round3(want)))
	}
	// How close one writer's CPU comes to its codec's alone.
	if one := find(rep.Results, writersName(1)); one.CPUByStage[StageCodec] > 0 {
		rep.Targets = append(rep.Targets, atMost("1-writer encode CPU / codec CPU", one.writerCPU()/one.CPUByStage[StageCodec], 1.15))
	}
	return rep, nil
}

func writersName(n int) string {
	if n == 1 {
		return "1-writer"
	}
	return fmt.Sprintf("%d-writers", n)
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return 0
}

// runMemory: peak RSS of durashuffle writing 1 GiB and 4 GiB of logical
// output over the link, with freshly generated input (the engine's own
// batches are part of what a writer process holds). The child applies
// memory_limit as durashuffle write does: by default the configuration's
// (auto: the bound less 52 MiB); MemoryLimits can add
// others, such as off for the Go runtime's defaults.
func (e *Env) runMemory(ctx context.Context) (*Report, error) {
	cfg := e.o.Config
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	d := e.o.Data
	d.Input = InputFresh
	d.WriteRows = 8192
	rep := &Report{Scenario: ScenarioMemory, Link: e.Link.Info(cfg.Write.UploadConcurrency), Setup: e.setup(d, cfg, e.storeName(), spl)}
	load := durashuffle.MemoryLoad{Writers: max(1, d.Workers)}
	bound := int64(cfg.MemoryBound(load))
	limits := e.o.MemoryLimits
	if len(limits) == 0 {
		limits = []durashuffle.MemoryLimit{cfg.Write.MemoryLimit}
	}
	type variant struct {
		logical int64
		limit   durashuffle.MemoryLimit
	}
	var names []string
	var vs []variant
	for _, lim := range limits {
		c := cfg
		c.Write.MemoryLimit = lim
		label := lim.String()
		if lim == durashuffle.MemoryLimitAuto {
			label += "(" + sizeString(int64(c.SoftMemoryLimit(load))) + ")"
		}
		for _, l := range e.o.MemLogical {
			names = append(names, sizeString(l)+"-logical memory_limit="+label)
			vs = append(vs, variant{l, lim})
		}
	}
	rep.Setup.Rows = int64(float64(slices.Max(e.o.MemLogical)) / bytesPerRow)
	e.logf("memory: %v, fresh input", names)
	rep.Results, err = e.rounds(ctx, names, func(name string, round int) *Job {
		i := indexOf(names, name)
		dd := d
		dd.Rows = int64(float64(vs[i].logical) / bytesPerRow)
		c := cfg
		c.Write.MemoryLimit = vs[i].limit
		return e.job("write", Durashuffle, e.query("memory", strconv.Itoa(i), strconv.Itoa(round)), c, dd)
	}, nil)
	if err != nil {
		return nil, err
	}
	for i := range rep.Results {
		rep.Results[i].MemoryBound = bound
		rep.Results[i].MaxBuffered = cfg.BufferedChunks()
	}
	per := len(e.o.MemLogical)
	for k := 0; k+per <= len(rep.Results); k += per {
		small, big := rep.Results[k], rep.Results[k+per-1]
		if per >= 2 {
			rep.Targets = append(rep.Targets,
				atMost(fmt.Sprintf("peak RSS %s / %s", big.Name, small.Name), ratio(float64(big.PeakRSSBytes), float64(small.PeakRSSBytes)), 1.1))
		}
		// The bound is the configuration's promise: it is a target for
		// the configuration's own memory_limit; the others (off: Go's
		// defaults) are shown for comparison in the table.
		if vs[k].limit != cfg.Write.MemoryLimit {
			continue
		}
		rep.Targets = append(rep.Targets,
			atMost(fmt.Sprintf("peak RSS %s / (max_buffered_chunks x chunk_size + coalesce_budget + 96 MiB = %s)", big.Name, sizeString(bound)),
				ratio(float64(big.PeakRSSBytes), float64(bound)), 1.0))
	}
	return rep, nil
}

// runSweep: durashuffle's write over a grid of chunk sizes and
// concurrencies (the table of apache/druid#16481), with a recommendation.
func (e *Env) runSweep(ctx context.Context) (*Report, error) {
	base := e.o.Config
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	d := e.data(e.o.Stored, spl)
	rep := &Report{Scenario: ScenarioSweep, Link: e.Link.Info(base.Write.UploadConcurrency), Setup: e.setup(d, base, e.storeName(), spl)}
	// Each cell has its own connection count and limit (see the results).
	rep.Link.Connections, rep.Link.LimitBytesPerS = 0, 0
	type cell struct {
		chunk durashuffle.Size
		conc  int
	}
	var cells []cell
	var names []string
	for _, cs := range e.o.ChunkSizes {
		for _, c := range e.o.Concurrencies {
			cells = append(cells, cell{cs, c})
			names = append(names, fmt.Sprintf("%s x %d", sizeString(int64(cs)), c))
		}
	}
	e.logf("sweep: %d cells, %d rows", len(cells), d.Rows)
	rep.Results, err = e.rounds(ctx, names, func(name string, round int) *Job {
		c := cells[indexOf(names, name)]
		cfg := base
		cfg.Write.ChunkSize, cfg.Write.UploadConcurrency = c.chunk, c.conc
		cfg.Write.MaxBufferedChunks = 0
		return e.job("write", Durashuffle, e.query("sweep", strconv.Itoa(indexOf(names, name)), strconv.Itoa(round)), cfg, d)
	}, func(name string, r *Result) {
		c := cells[indexOf(names, name)]
		r.ChunkSize, r.Concurrency = int64(c.chunk), c.conc
		r.MaxBuffered = 2 * c.conc
		r.LinkFraction = round3(ratio(r.StoredBytesPerS, float64(e.Link.Limit(c.conc))))
	})
	if err != nil {
		return nil, err
	}
	rep.Recommendation = recommend(rep.Results)
	return rep, nil
}

// recommend picks the fastest cell, or, among cells within 5% of it, the
// one with the smallest peak RSS.
func recommend(rs []Result) string {
	if len(rs) == 0 {
		return ""
	}
	best := rs[0]
	for _, r := range rs {
		if r.StoredBytesPerS > best.StoredBytesPerS {
			best = r
		}
	}
	pick := best
	for _, r := range rs {
		if r.StoredBytesPerS >= 0.95*best.StoredBytesPerS && r.PeakRSSBytes < pick.PeakRSSBytes {
			pick = r
		}
	}
	return fmt.Sprintf("chunk_size %s, upload_concurrency %d: %.1f MiB/s stored (%.0f%% of the fastest cell, %s), peak RSS %s",
		sizeString(pick.ChunkSize), pick.Concurrency, pick.StoredBytesPerS/(1<<20),
		100*pick.StoredBytesPerS/best.StoredBytesPerS, best.Name, sizeString(pick.PeakRSSBytes))
}

// probe measures the link before a scenario's rounds (see probeLink).
func (e *Env) probe(ctx context.Context, rep *Report, cfg durashuffle.Config) error {
	if e.o.Faults != nil {
		// The probe measures the bare link; injected faults would only
		// fail it (it does not retry), so with --faults it is not run.
		e.logf("  link probe: skipped under --faults")
		return nil
	}
	put, get, err := e.probeLink(ctx, cfg.Write.UploadConcurrency, int64(cfg.Write.ChunkSize))
	if err != nil {
		return err
	}
	rep.Link.ProbePutBytesPerS, rep.Link.ProbeGetBytesPerS = put, get
	if put > 0 {
		e.logf("  link probe: PUT %.1f MiB/s, GET %.1f MiB/s (limit %.1f MiB/s)", put/(1<<20), get/(1<<20), float64(rep.Link.LimitBytesPerS)/(1<<20))
	}
	return nil
}
