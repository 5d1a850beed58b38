package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestMain lets the test binary act as a bench child process.
func TestMain(m *testing.M) {
	if os.Getenv(ChildEnv) == "1" {
		if err := RunChild(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m)
}

func smokeOptions(t *testing.T) *Options {
	t.Helper()
	cfg := durashuffle.DefaultConfig()
	return &Options{
		Config: cfg, Latency: 2 * time.Millisecond, ConnBandwidth: 256 << 20, Rounds: 1, TLS: true,
		Stored: 16 << 20, Readers: 4, SmallRows: []int{128, 8192}, Writers: []int{1, 2},
		MemLogical: []int64{8 << 20, 16 << 20}, ChunkSizes: []durashuffle.Size{5 * durashuffle.MiB}, Concurrencies: []int{2},
		Data:   Data{Input: InputPool, Partitions: 8, WriteRows: 128, PoolRows: 8192, Producers: 2, Workers: 1, Seed: 1},
		Runner: &Runner{Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{ChildEnv + "=1"}, Stderr: os.Stderr},
	}
}

// runScenario starts an Env with o and runs scenario in it; the Env is
// closed when the test ends.
func runScenario(t *testing.T, o *Options, scenario string) (*Env, *Report) {
	t.Helper()
	ctx := context.Background()
	env, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	rep, err := env.Run(ctx, scenario)
	if err != nil {
		t.Fatal(err)
	}
	return env, rep
}

// TestWriteContenders: write with WriteContenders runs only those
// contenders, encodes no files for uploaders that do not run, and reports
// only the targets whose contenders all ran.
func TestWriteContenders(t *testing.T) {
	o := smokeOptions(t)
	o.WriteContenders = []string{Durashuffle, Sequential}
	env, rep := runScenario(t, o, ScenarioWrite)
	var names []string
	for _, r := range rep.Results {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "durashuffle,sequential" {
		t.Fatalf("contenders %v, want durashuffle and sequential", names)
	}
	if _, err := os.Stat(filepath.Join(env.workDir, "encoded")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("files encoded for uploaders that did not run: %v", err)
	}
	var targets []string
	for _, tg := range rep.Targets {
		targets = append(targets, tg.Name)
		for _, other := range []string{"auto", "spill-off", "transfermanager", "manager"} {
			if strings.Contains(tg.Name, other) {
				t.Fatalf("target %q compares a contender that did not run", tg.Name)
			}
		}
	}
	if !slices.Contains(targets, "durashuffle / sequential") || !slices.Contains(targets, "durashuffle upload phase / link limit") {
		t.Fatalf("targets %v: want those of durashuffle and sequential", targets)
	}
}

// TestSmokeWrite runs the write scenario at a tiny size, so that the code
// path cannot rot; it asserts shape, not speed (speed is what `make
// bench` measures).
func TestSmokeWrite(t *testing.T) {
	o := smokeOptions(t)
	_, rep := runScenario(t, o, ScenarioWrite)
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Scenario string `json:"scenario"`
		Link     struct {
			LatencyMS          float64 `json:"latency_ms"`
			ConnBandwidthBytes int64   `json:"conn_bandwidth_bytes"`
			LimitBytesPerS     int64   `json:"limit_bytes_per_s"`
		} `json:"link"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Scenario != "write" || got.Link.LatencyMS != 2 || got.Link.LimitBytesPerS != 8*got.Link.ConnBandwidthBytes {
		t.Fatalf("scenario %q link %+v", got.Scenario, got.Link)
	}
	var names []string
	for _, r := range got.Results {
		names = append(names, fmt.Sprint(r["name"]))
		for _, k := range []string{"seconds", "stored_bytes_per_s", "logical_bytes_per_s", "peak_rss_bytes", "requests"} {
			if _, ok := r[k]; !ok {
				t.Errorf("result %v has no %q", r["name"], k)
			}
		}
		if r["peak_rss_bytes"].(float64) <= 0 || r["seconds"].(float64) <= 0 {
			t.Errorf("result %v: peak RSS %v, seconds %v", r["name"], r["peak_rss_bytes"], r["seconds"])
		}
	}
	if strings.Join(names, ",") != "durashuffle,durashuffle-encrypted,durashuffle-auto,durashuffle-spill-off,durashuffle-encode-only,sequential,transfermanager,manager" {
		t.Fatalf("contenders %v", names)
	}
	// The encrypted writer writes the same rows, sealed: 28 bytes more a
	// frame. Its frames are cut in a run of their own (where batches fall
	// between frames depends on timing), so its stored bytes are those
	// of durashuffle's run within a few percent, not to the byte.
	if enc, plain := find(rep.Results, DurashuffleEncrypted), find(rep.Results, Durashuffle); enc.Rows != plain.Rows || enc.StoredBytes < plain.StoredBytes*95/100 || enc.StoredBytes > plain.StoredBytes*110/100 {
		t.Fatalf("durashuffle-encrypted wrote %d rows in %d bytes, durashuffle %d rows in %d", enc.Rows, enc.StoredBytes, find(rep.Results, Durashuffle).Rows, find(rep.Results, Durashuffle).StoredBytes)
	}
	ds, tm, mgr := find(rep.Results, Durashuffle), find(rep.Results, TransferManager), find(rep.Results, Manager)
	if auto := find(rep.Results, DurashuffleAuto); auto.Rows != ds.Rows || len(auto.Codecs) == 0 {
		t.Fatalf("durashuffle-auto wrote %d rows (codecs %v), durashuffle %d", auto.Rows, auto.Codecs, ds.Rows)
	}
	// PUT-class requests per GiB stored: puts, creates, parts and
	// completes over the bytes stored.
	for _, r := range []*Result{ds, mgr} {
		puts := r.Requests["PutObject"] + r.Requests["CreateMultipartUpload"] + r.Requests["UploadPart"] + r.Requests["CompleteMultipartUpload"]
		if want := math.Round(float64(puts)/(float64(r.StoredBytes)/(1<<30))*100) / 100; puts == 0 || r.PutPerGiB != want {
			t.Fatalf("%s: put_requests_per_gib %v, its requests %v over %d bytes stored make %v", r.Name, r.PutPerGiB, r.Requests, r.StoredBytes, want)
		}
	}
	// The timeline of the writers over the link: their input ends, then
	// their data requests start and end, in that order (a spilling
	// writer's first part waits for its input to end); transfermanager
	// has no input phase.
	for _, r := range []*Result{ds, find(rep.Results, DurashuffleSpillOff), find(rep.Results, Sequential)} {
		if r.InputSeconds <= 0 || r.FirstDataSeconds <= 0 || r.LastDataStartSeconds < r.FirstDataSeconds || r.LastDataSeconds < r.LastDataStartSeconds ||
			r.LastDataSeconds > r.Seconds || r.DataInFlight <= 0 || r.UploadLinkFraction <= 0 || r.AfterInputLinkFraction <= 0 {
			t.Fatalf("%s timeline: input end %.3f s, data from %.3f s (the last from %.3f s) to %.3f s of %.3f s, %.2f in flight, upload phase %.3f and after input %.3f of the link",
				r.Name, r.InputSeconds, r.FirstDataSeconds, r.LastDataStartSeconds, r.LastDataSeconds, r.Seconds, r.DataInFlight, r.UploadLinkFraction, r.AfterInputLinkFraction)
		}
	}
	if ds.FirstDataSeconds < ds.InputSeconds {
		t.Fatalf("durashuffle (spill on) sent data at %.3f s, before its input ended at %.3f s", ds.FirstDataSeconds, ds.InputSeconds)
	}
	if tm.InputSeconds != 0 || tm.AfterInputLinkFraction != 0 {
		t.Fatalf("transfermanager has an input phase: %.3f s", tm.InputSeconds)
	}
	var tl strings.Builder
	timelineMarkdown(&tl, rep)
	if !strings.Contains(tl.String(), "| durashuffle |") || strings.Contains(tl.String(), "| transfermanager |") {
		t.Fatalf("timeline table:\n%s", tl.String())
	}
	// Spill off uploads the same rows over the link; encode-only encodes
	// them for the null store, which nothing sends over the link.
	if off := find(rep.Results, DurashuffleSpillOff); off.Rows != ds.Rows || off.Requests["UploadPart"]+off.Requests["PutObject"] == 0 || off.LinkFraction <= 0 {
		t.Fatalf("durashuffle-spill-off wrote %d rows with requests %v, %.3f of the link; durashuffle %d rows", off.Rows, off.Requests, off.LinkFraction, ds.Rows)
	}
	if enc := find(rep.Results, DurashuffleEncodeOnly); enc.Rows != ds.Rows || enc.StoredBytes == 0 || enc.LinkFraction != 0 || len(enc.CPUByStage) == 0 {
		t.Fatalf("durashuffle-encode-only: %d rows, %d bytes, %.3f of the link, CPU by stage %v; durashuffle %d rows",
			enc.Rows, enc.StoredBytes, enc.LinkFraction, enc.CPUByStage, ds.Rows)
	}
	// durashuffle's CPU, divided by stage from its profile, adds up to
	// the CPU measured, lz4 part of it.
	var sum float64
	for _, s := range ds.CPUByStage {
		sum += s
	}
	if ds.CPUSeconds <= 0 || ds.CPUProfileSeconds <= 0 || math.Abs(sum-ds.CPUSeconds) > 0.01*ds.CPUSeconds || ds.CPUByStage[StageCodec] <= 0 {
		t.Fatalf("durashuffle CPU %.3f s (%.3f s sampled), by stage %v (sum %.3f s)", ds.CPUSeconds, ds.CPUProfileSeconds, ds.CPUByStage, sum)
	}
	for _, r := range []*Result{tm, mgr, find(rep.Results, Sequential)} {
		if r.CPUByStage != nil || r.CPUProfileSeconds != 0 {
			t.Errorf("%s has CPU by stage %v: only durashuffle's writers are profiled", r.Name, r.CPUByStage)
		}
	}
	var targets []string
	for _, tg := range rep.Targets {
		targets = append(targets, tg.Name)
	}
	for _, want := range []string{"durashuffle CRC32C / writer CPU", "durashuffle upload CPU per GiB stored / manager's",
		"durashuffle-encrypted time / durashuffle time", "durashuffle-encrypted CPU / durashuffle CPU",
		"durashuffle stored / (time after input) / link limit", "durashuffle upload phase / link limit",
		"durashuffle-spill-off / link limit", "durashuffle-spill-off / transfermanager", "durashuffle-spill-off / manager"} {
		if !slices.Contains(targets, want) {
			t.Errorf("no target %q in %q", want, targets)
		}
	}
	if mgr.StoredBytes != tm.StoredBytes {
		t.Fatalf("manager uploaded %d bytes, transfermanager %d: want the same files", mgr.StoredBytes, tm.StoredBytes)
	}
	// The same rows and configuration; frame boundaries depend on how two
	// producers interleave, so the sizes agree closely, not exactly.
	if ds.StoredBytes == 0 || ratio(float64(ds.StoredBytes), float64(tm.StoredBytes)) < 0.95 || ratio(float64(ds.StoredBytes), float64(tm.StoredBytes)) > 1.05 {
		t.Fatalf("durashuffle stored %d bytes, transfermanager %d: want about the same bytes", ds.StoredBytes, tm.StoredBytes)
	}
	var text bytes.Buffer
	PrintText(&text, rep)
	if !strings.Contains(text.String(), "transfermanager") || !strings.Contains(text.String(), "CPU by stage") {
		t.Fatalf("text report:\n%s", text.String())
	}
	dir := t.TempDir()
	if err := Plot(rep, filepath.Join(dir, "write.png")); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "B.md")
	os.WriteFile(md, []byte("# prose\n\n<!-- bench:write -->\nold\n<!-- /bench:write -->\n\nafter\n"), 0o644)
	if err := UpdateMarkdown(md, []*Report{rep}, dir); err != nil {
		t.Fatal(err)
	}
	mb, _ := os.ReadFile(md)
	if s := string(mb); strings.Contains(s, "\nold\n") || !strings.Contains(s, "after") || !strings.Contains(s, "| durashuffle |") ||
		!strings.Contains(s, "CPU by stage") || !strings.Contains(s, "| contender | CPU s | writer CPU s | profiled s | codec |") {
		t.Fatalf("markdown:\n%s", s)
	}
}

// TestSmokeRead reads a tiny stage back with both readers.
func TestSmokeRead(t *testing.T) {
	ctx := context.Background()
	env, err := Start(ctx, smokeOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	rep, err := env.Run(ctx, ScenarioRead)
	if err != nil {
		t.Fatal(err)
	}
	ds, tm, mgr := find(rep.Results, Durashuffle), find(rep.Results, TransferManager), find(rep.Results, Manager)
	if ds.ManifestGets != 2 || ds.Rows == 0 || ds.StoredBytes != tm.StoredBytes || mgr.StoredBytes != tm.StoredBytes {
		t.Fatalf("durashuffle read %+v, transfermanager %+v, manager %+v", ds, tm, mgr)
	}
	// The encrypted contender reads its own sealed stage of the same rows
	// (written apart, so its frames, and so its bytes, may be cut
	// otherwise: within a tenth of the plain stage's).
	if enc := find(rep.Results, DurashuffleEncrypted); enc.Rows != ds.Rows || enc.ManifestGets != 2 ||
		enc.StoredBytes < ds.StoredBytes*9/10 || enc.StoredBytes > ds.StoredBytes*11/10 {
		t.Fatalf("durashuffle-encrypted read %d rows of %d bytes with %d metadata GETs; durashuffle %d rows of %d bytes", enc.Rows, enc.StoredBytes, enc.ManifestGets, ds.Rows, ds.StoredBytes)
	}
}

// TestSmokeCPUScenarios runs small-batches and encode on the null store;
// encode at 16 MiB stored, which gives lz4 a dozen profile samples or so.
func TestSmokeCPUScenarios(t *testing.T) {
	ctx := context.Background()
	o := smokeOptions(t)
	env, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	for _, s := range []string{ScenarioSmallBatches, ScenarioEncode} {
		o.Stored = 4 << 20
		if s == ScenarioEncode {
			o.Stored = 16 << 20
		}
		rep, err := env.Run(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Results) != 2 || len(rep.Targets) == 0 || rep.Results[0].LogicalBytes == 0 {
			t.Fatalf("%s: %+v", s, rep)
		}
		if s != ScenarioEncode {
			continue
		}
		// Every encode child's CPU is divided by stage, and the codec's
		// share of one writer's is a target.
		for _, r := range rep.Results {
			if r.CPUByStage[StageCodec] <= 0 || r.CPUProfileSeconds <= 0 {
				t.Errorf("%s: CPU %.3f s by stage %v (%.3f s sampled)", r.Name, r.CPUSeconds, r.CPUByStage, r.CPUProfileSeconds)
			}
		}
		if tg := rep.Targets[len(rep.Targets)-1]; tg.Name != "1-writer encode CPU / codec CPU" || tg.Got < 1 {
			t.Errorf("encode targets %+v", rep.Targets)
		}
	}
	// The profiles taken for the stages alone are gone once read.
	if left, _ := filepath.Glob(filepath.Join(env.workDir, "*.pprof")); len(left) > 0 {
		t.Errorf("profiles left behind: %v", left)
	}
}

func TestMemServerRanges(t *testing.T) {
	for _, c := range []struct {
		h      string
		lo, hi int64
		ok     bool
	}{
		{"bytes=0-9", 0, 10, true}, {"bytes=5-", 5, 100, true}, {"bytes=-10", 90, 100, true},
		{"bytes=90-200", 90, 100, true}, {"bytes=100-", 0, 0, false}, {"bytes=5-4", 0, 0, false}, {"items=0-1", 0, 0, false},
	} {
		lo, hi, ok := parseRange(c.h, 100)
		if ok != c.ok || (ok && (lo != c.lo || hi != c.hi)) {
			t.Errorf("parseRange(%q) = %d, %d, %v; want %d, %d, %v", c.h, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

// TestSmokeWriteUnderFaults runs the write scenario with the fault proxy
// between the link and the endpoint (bench --faults): every contender
// still finishes, and the proxy did inject faults.
func TestSmokeWriteUnderFaults(t *testing.T) {
	ctx := context.Background()
	o := smokeOptions(t)
	var log strings.Builder
	o.Log = &log
	o.Faults = &faultproxy.Spec{SlowDown: 0.2, Internal: 0.05, Seed: 5}
	env, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Run(ctx, ScenarioWrite)
	env.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Every contender of write on S3: durashuffle's and S3's baselines.
	want := slices.DeleteFunc(slices.Clone(WriteContenders), func(n string) bool {
		return isBaseline(n) && !slices.Contains(Baselines[StoreKind(o.Config)], n)
	})
	if len(rep.Results) != len(want) {
		t.Fatalf("%d contenders finished, want %d (%v)", len(rep.Results), len(want), want)
	}
	if !strings.Contains(log.String(), "faults injected") || strings.Contains(log.String(), "faults 0") {
		t.Fatalf("no faults were injected:\n%s", log.String())
	}
}

// TestSmokePartitions runs bench partitions at a tiny size, two rounds:
// every cell writes and reads back the same rows, by range readers and by
// transfermanager and manager downloading the data objects whole, the
// 4-writer cell at the wide count is added, what it reports (frames, runs,
// requests, bounds) is consistent, and the progress bars count every run;
// no time is asserted.
func TestSmokePartitions(t *testing.T) {
	o := smokeOptions(t)
	o.Stored = 4 << 20
	o.Rounds = 2
	o.PartitionCounts, o.PartitionWriters, o.RangeReaders, o.WidePartitions = []int{8, 64}, []int{1, 2}, 4, 64
	rec := &recorder{}
	o.Runner.Watch = rec
	_, rep := runScenario(t, o, ScenarioPartitions)
	var cells []string
	for _, r := range rep.Partitions {
		cells = append(cells, r.name())
	}
	if got, want := strings.Join(cells, ", "), "P=8 x 1-writer, P=8 x 2-writers, P=64 x 1-writer, P=64 x 2-writers, P=64 x 4-writers"; got != want {
		t.Fatalf("cells %s, want %s", got, want)
	}
	// The medians: every cell's write and its three reads, each of the
	// same rows, over both rounds.
	rows := rep.Partitions[0].Write.Rows
	for _, r := range rep.Partitions {
		w, rd := r.Write, r.Read
		// Every partition has rows from every writer: at least one frame
		// each, and at least one run per writer's object.
		if w.Frames < r.Partitions*r.Writers || w.Objects != r.Writers || w.Runs < r.Writers || w.Runs > w.Frames {
			t.Errorf("%s: %d frames, %d objects, %d runs", r.name(), w.Frames, w.Objects, w.Runs)
		}
		// One PUT per part or small object, one worker manifest each.
		if puts := w.Requests["UploadPart"] + w.Requests["PutObject"]; puts < int64(2*r.Writers) {
			t.Errorf("%s: write requests %v", r.name(), w.Requests)
		}
		// Each of the 4 range readers opens the stage (at least one
		// metadata GET) and GETs its frames.
		if rd.MetadataGets < 4 || rd.MetadataBytes == 0 || rd.DataGets < 4 || rd.DataGets+rd.MetadataGets != rd.Requests["GetObject"] {
			t.Errorf("%s: read %d data GETs (%d bytes), %d metadata GETs (%d bytes), requests %v",
				r.name(), rd.DataGets, rd.DataGetBytes, rd.MetadataGets, rd.MetadataBytes, rd.Requests)
		}
		if w.MemoryBound != int64(o.Config.MemoryBound(durashuffle.MemoryLoad{Writers: r.Writers})) ||
			rd.MemoryBound != int64(o.Config.MemoryBound(durashuffle.MemoryLoad{Readers: 4})) || w.PeakRSSBytes <= 0 || rd.PeakRSSBytes <= 0 || w.InputBytes <= 0 {
			t.Errorf("%s: write RSS %d of %d (input %d), read RSS %d of %d", r.name(), w.PeakRSSBytes, w.MemoryBound, w.InputBytes, rd.PeakRSSBytes, rd.MemoryBound)
		}
		for _, x := range []Result{w, rd, r.TM, r.Manager} {
			if x.Rows != rows || x.StoredBytes == 0 || x.Seconds <= 0 || x.StoredBytesPerS != float64(x.StoredBytes)/x.Seconds || len(x.Rounds) != 2 {
				t.Errorf("%s: %d rows, %d bytes in %.3f s, %.0f B/s, rounds %v; want %d rows",
					x.Name, x.Rows, x.StoredBytes, x.Seconds, x.StoredBytesPerS, x.Rounds, rows)
			}
		}
		for _, d := range []Result{r.TM, r.Manager} {
			if d.Objects != w.Objects || d.Requests["GetObject"] < int64(w.Objects) || d.LinkFraction <= 0 {
				t.Errorf("%s: %d objects, requests %v, %.3f of the link; the stage has %d objects", d.Name, d.Objects, d.Requests, d.LinkFraction, w.Objects)
			}
		}
		if rd.Name != r.name()+" range read" || r.TM.Name != r.name()+" transfermanager read" || r.Manager.Name != r.name()+" manager read" {
			t.Errorf("%s: reads named %q, %q, %q", r.name(), rd.Name, r.TM.Name, r.Manager.Name)
		}
	}

	// Every run as it ran. The bars' run counter: a write and three
	// reads per cell and round, numbered 1 to 4 x 2 x 5 in the order they
	// ran; each write followed by its cell's three reads, the first of
	// them rotating per round; each read moved the stage just written.
	var ran []*watched
	for _, w := range rec.runs {
		if w.job.Round != nil {
			ran = append(ran, w)
		}
	}
	runs := 4 * 2 * len(rep.Partitions)
	if len(ran) != runs {
		t.Fatalf("%d runs watched, want %d", len(ran), runs)
	}
	first := map[int]map[string]bool{}
	for i, wr := range ran {
		r := wr.job.Round
		if r.Run != i+1 || r.Runs != runs || r.Rounds != 2 {
			t.Errorf("run %d: %+v, want run %d of %d", i+1, *r, i+1, runs)
		}
		if i%4 != 0 {
			continue
		}
		cell, ok := strings.CutSuffix(r.Name, " write")
		if !ok {
			t.Fatalf("run %d is %q, want a write", i+1, r.Name)
		}
		w := wr.result
		var reads []string
		for _, rr := range ran[i+1 : i+4] {
			read, ok := strings.CutPrefix(rr.job.Round.Name, cell+" ")
			if !ok || rr.job.Round.Round != r.Round {
				t.Fatalf("after %q (round %d): %q (round %d)", r.Name, r.Round, rr.job.Round.Name, rr.job.Round.Round)
			}
			reads = append(reads, read)
			d := rr.result
			switch rr.job.Name {
			case DurashuffleRanges:
				// Every byte of the stage's frames, GET at least once.
				if d.Rows != w.Rows || d.DataGetBytes < w.StoredBytes {
					t.Errorf("%s, round %d: %s read %d rows, %d data bytes; the stage has %d rows, %d bytes", cell, r.Round, read, d.Rows, d.DataGetBytes, w.Rows, w.StoredBytes)
				}
			default:
				// Every data object whole: the stage's stored bytes.
				if d.StoredBytes != w.StoredBytes || d.Objects != w.Objects || d.Requests["GetObject"] < int64(w.Objects) {
					t.Errorf("%s, round %d: %s downloaded %d bytes of %d objects with requests %v; the stage has %d bytes in %d objects",
						cell, r.Round, read, d.StoredBytes, d.Objects, d.Requests, w.StoredBytes, w.Objects)
				}
			}
		}
		if got := strings.Join(slices.Sorted(slices.Values(reads)), ","); got != "manager read,range read,transfermanager read" {
			t.Errorf("%s, round %d: reads %v", cell, r.Round, reads)
		}
		if first[r.Round] == nil {
			first[r.Round] = map[string]bool{}
		}
		first[r.Round][reads[0]] = true
	}
	if !first[1]["range read"] || len(first[1]) != 1 || !first[2]["transfermanager read"] || len(first[2]) != 1 {
		t.Errorf("first read of each cell by round: %v; want range read in round 1, transfermanager read in round 2", first)
	}

	var names []string
	for _, tg := range rep.Targets {
		names = append(names, tg.Name)
	}
	// 3 per writer count comparing P=64 with P=8; at both counts and both
	// grid writer counts, range read against the link, transfermanager
	// and manager; the two RSS bounds; the request budget.
	if len(rep.Targets) != 6+2*2*3+2+1 || !strings.Contains(names[len(names)-1], "GETs reading the 4 x 64 stage") {
		t.Fatalf("targets %q", names)
	}
	for _, want := range []string{
		"1-writer, P=8: range read / link limit", "1-writer, P=8: range read / transfermanager", "1-writer, P=8: range read / manager",
		"2-writers, P=64: range read / link limit", "2-writers, P=64: range read / transfermanager", "2-writers, P=64: range read / manager",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("no target %q in %q", want, names)
		}
	}
	dir := t.TempDir()
	if err := Plot(rep, filepath.Join(dir, "partitions.png")); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "B.md")
	if err := UpdateMarkdown(md, []*Report{rep}, dir); err != nil {
		t.Fatal(err)
	}
	mb, _ := os.ReadFile(md)
	if s := string(mb); !strings.Contains(s, "| 64 | 4 |") || !strings.Contains(s, "GETs reading the 4 x 64 stage") ||
		!strings.Contains(s, "downloaded whole by transfermanager (tm) and manager") || strings.Contains(s, " / - ") {
		t.Fatalf("markdown:\n%s", s)
	}
	var text bytes.Buffer
	PrintText(&text, rep)
	if s := text.String(); !strings.Contains(s, "read metadata GETs") || !strings.Contains(s, "ranges / tm / manager") || strings.Contains(s, " / - ") {
		t.Fatalf("text report:\n%s", s)
	}
}

// TestChildProfiles: with CPUProfile and MemProfile set, every child
// writes both profiles, named by job and run, and the heap profile is a
// pprof profile with in-use samples.
func TestChildProfiles(t *testing.T) {
	o := smokeOptions(t)
	o.Stored = 4 << 20
	dir := t.TempDir()
	o.Runner.CPUProfile = filepath.Join(dir, "cpu")
	o.Runner.MemProfile = filepath.Join(dir, "heap")
	_, rep := runScenario(t, o, ScenarioEncode)
	// The profiles kept are the ones the CPU by stage came from.
	for _, r := range rep.Results {
		if len(r.CPUByStage) == 0 {
			t.Errorf("%s: no CPU by stage", r.Name)
		}
	}
	for _, kind := range []string{"cpu", "heap"} {
		files, _ := filepath.Glob(filepath.Join(dir, kind+".write-*"))
		if len(files) != 2 {
			t.Fatalf("%s profiles %v, want one per child (2)", kind, files)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: not a pprof profile (%d bytes): %v", f, len(b), err)
			}
			raw, err := io.ReadAll(zr)
			if err != nil || len(raw) == 0 {
				t.Fatalf("%s: %d bytes after gunzip: %v", f, len(raw), err)
			}
			if kind == "heap" && !bytes.Contains(raw, []byte("inuse_space")) {
				t.Fatalf("%s: no inuse_space samples", f)
			}
		}
	}
}
