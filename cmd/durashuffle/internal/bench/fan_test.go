package bench

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/store"
)

// TestSmokeFan runs bench fan at a tiny shape, one round: 2 writers x 2
// readers at 64 partitions, each writer 1x and 3x a 512 KiB budget (3x
// sorts through several runs). Every contender that runs reads back the
// rows it wrote; druid stores one object per writer and partition and
// GETs each once, map-file one object per writer and one GET per reader
// and writer; durashuffle's spill keeps one run per object.
func TestSmokeFan(t *testing.T) {
	ctx := context.Background()
	o := smokeOptions(t)
	o.Config.Write.ChunkSize, o.Config.Write.UploadConcurrency = 5*durashuffle.MiB, 2
	o.Config.Write.FrameTargetBytes = 256 * durashuffle.KiB
	const writers, readers, parts = 2, 2, 64
	o.FanShapes, o.FanMultiples, o.FanPartitions, o.FanCoalesceBudget = []FanShape{{writers, readers}}, []int{1, 3}, parts, 512*durashuffle.KiB
	env, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	rep, err := env.Run(ctx, ScenarioFan)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Fan) != 2*len(fanContenders) {
		t.Fatalf("%d rows, want %d", len(rep.Fan), 2*len(fanContenders))
	}
	for _, r := range rep.Fan {
		name := r.cellName() + " " + r.Contender
		if r.NotRun != "" {
			t.Errorf("%s: not run: %s", name, r.NotRun)
			continue
		}
		w, rd := r.Write, r.Read
		rows := int64(writers) * int64(float64(r.Multiple)*float64(o.FanCoalesceBudget)/bytesPerRow)
		if w.Rows != rows || rd.Rows != rows || w.LogicalBytes == 0 || rd.LogicalBytes != w.LogicalBytes {
			t.Errorf("%s: wrote %d rows (%d logical bytes), read %d (%d); want %d rows", name, w.Rows, w.LogicalBytes, rd.Rows, rd.LogicalBytes, rows)
		}
		if w.StoredBytes == 0 || w.PeakRSSBytes <= 0 || w.Seconds <= 0 || rd.Seconds <= 0 || putRequests(w) == 0 {
			t.Errorf("%s: %d bytes stored, RSS %d, write %.3f s with requests %v, read %.3f s", name, w.StoredBytes, w.PeakRSSBytes, w.Seconds, w.Requests, rd.Seconds)
		}
		switch r.Contender {
		case Durashuffle:
			// One partition-sorted run per writer object, however many
			// runs the 3x output flushed.
			if w.Runs != writers {
				t.Errorf("%s: %d runs as stored over %d writers, want one each", name, w.Runs, writers)
			}
		case FanSpillOff:
			if r.Multiple > 1 && w.Runs <= writers {
				t.Errorf("%s: %d runs as stored over %d writers at %dx the budget, want several each", name, w.Runs, writers, r.Multiple)
			}
		case Druid:
			if w.Objects != writers*parts || w.Requests["PutObject"] != writers*parts || getRequests(rd) != writers*parts {
				t.Errorf("%s: %d objects, requests %v, %d GETs; want %d objects, PUTs and GETs", name, w.Objects, w.Requests, getRequests(rd), writers*parts)
			}
		case MapFile:
			if w.Objects != writers || getRequests(rd) != writers*readers {
				t.Errorf("%s: %d objects, %d GETs; want %d objects and %d GETs", name, w.Objects, getRequests(rd), writers, writers*readers)
			}
		}
		if r.Contender == Druid || r.Contender == MapFile {
			// At least one writer's sorted output was on disk at once.
			if w.LocalDiskBytes < w.StoredBytes/writers {
				t.Errorf("%s: %d bytes on local disk at most, stored %d", name, w.LocalDiskBytes, w.StoredBytes)
			}
		}
	}
	if len(rep.Targets) != 2+2*4 {
		t.Fatalf("%d targets, want 10: %+v", len(rep.Targets), rep.Targets)
	}
	for _, tg := range rep.Targets {
		if !strings.HasPrefix(tg.Name, "2x2 ") {
			t.Errorf("target %q is not of the 2x2 shape", tg.Name)
		}
	}
	var text bytes.Buffer
	PrintText(&text, rep)
	dir := t.TempDir()
	if err := Plot(rep, filepath.Join(dir, "fan.png")); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "B.md")
	if err := UpdateMarkdown(md, []*Report{rep}, dir); err != nil {
		t.Fatal(err)
	}
	mb, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"text": text.String(), "markdown": string(mb)} {
		for _, want := range []string{"map-file", "druid", "spill-off", "PUT-class requests"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s report has no %q:\n%s", what, want, s)
			}
		}
	}
	if !strings.Contains(string(mb), "<!-- bench:fan -->") || !strings.Contains(string(mb), "![fan](fan.png)") {
		t.Errorf("markdown:\n%s", mb)
	}
}

// TestFanRunSorter: rows of 16 partitions written in small batches through a
// budget that spills several runs, then merged into one map file. Each
// partition's bytes, in the map file by its index and as the sorter
// hands them to druid, decode as a stream of that partition's rows only,
// all of them.
func TestFanRunSorter(t *testing.T) {
	const parts, total = 16, 20000
	dir := t.TempDir()
	disk := &diskMeter{}
	s, err := newRunSorter(dir, "w0", parts, 256<<10, disk)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, parts)
	b, err := demo.NewBatcher(demo.Generator{Seed: 3}, parts, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	for _, rg := range demo.Chunks(demo.Range{Lo: 0, Hi: total}, 1000) {
		for _, pt := range b.Batch(rg, nil) {
			want[pt.Partition] += pt.Record.NumRows()
			err := s.Write(pt.Partition, pt.Record)
			pt.Record.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(s.runs) < 3 {
		t.Fatalf("%d runs, want several", len(s.runs))
	}
	// rowsOf decodes a stream and checks that every row is partition p's.
	rowsOf := func(r io.Reader, p int) int64 {
		t.Helper()
		rd, err := ipc.NewReader(r)
		if err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
		defer rd.Release()
		var n int64
		for rd.Next() {
			keys := rd.RecordBatch().Column(0).(*array.Int64)
			for i := range keys.Len() {
				if got := demo.PartitionOf(keys.Value(i), parts); got != p {
					t.Fatalf("partition %d has a row of partition %d", p, got)
				}
			}
			n += int64(keys.Len())
		}
		if err := rd.Err(); err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
		return n
	}
	for p := range parts {
		body := io.MultiReader(bytes.NewReader(schemaPrefix()), s.partition(p), bytes.NewReader(eos))
		if n := rowsOf(body, p); n != want[p] {
			t.Errorf("druid object of partition %d: %d rows, want %d", p, n, want[p])
		}
	}
	path := filepath.Join(dir, "w0.data")
	off, err := s.merge(path)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(file)) != off[parts]+int64(len(eos)) || !bytes.HasPrefix(file, schemaPrefix()) {
		t.Fatalf("map file of %d bytes, index ends at %d", len(file), off[parts])
	}
	for p := range parts {
		body := io.MultiReader(bytes.NewReader(schemaPrefix()), bytes.NewReader(file[off[p]:off[p+1]]), bytes.NewReader(eos))
		if n := rowsOf(body, p); n != want[p] {
			t.Errorf("map file, partition %d: %d rows, want %d", p, n, want[p])
		}
	}
	// The runs are gone once merged; the map file goes with remove.
	if disk.now != int64(len(file)) || disk.high() <= int64(len(file)) {
		t.Errorf("on disk: %d bytes now, %d at most; the map file has %d", disk.now, disk.high(), len(file))
	}
	s.remove()
	left, _ := os.ReadDir(dir)
	if len(left) != 0 || disk.now != 0 {
		t.Errorf("after remove: %d files, %d bytes counted", len(left), disk.now)
	}
}

// TestFanObjectUploader: objects above the part size go as multipart
// uploads of part-sized parts, the others as one PutObject; the store
// then holds every byte and no upload is left open.
func TestFanObjectUploader(t *testing.T) {
	ctx := context.Background()
	srv, err := StartMemServer("up")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	counter := &store.Counter{}
	st, err := s3store.New(ctx, s3store.Options{Bucket: "up", Endpoint: srv.Endpoint(), Region: "us-east-1",
		PathStyle: true, AccessKeyID: "bench", SecretAccessKey: "bench", Counter: counter})
	if err != nil {
		t.Fatal(err)
	}
	up := newObjectUploader(st, 1000, 2, 2, true, durashuffle.DefaultConfig().Write.CleanupTimeout.D())
	objs := map[string][]byte{"a": bytes.Repeat([]byte("abcdefg"), 357), "b": bytes.Repeat([]byte("xy"), 350), "c": []byte("z")}
	var g errgroup.Group
	for _, k := range []string{"a", "b", "c"} {
		if err := up.upload(ctx, &g, k, int64(len(objs[k])), bytes.NewReader(objs[k])); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for k, want := range objs {
		rc, err := st.GetRange(ctx, k, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes (%v), want %d", k, len(got), err, len(want))
		}
	}
	q := counter.Requests()
	if q["CreateMultipartUpload"] != 1 || q["UploadPart"] != 3 || q["CompleteMultipartUpload"] != 1 || q["PutObject"] != 2 {
		t.Errorf("requests %v: want a (2,499 bytes) in 3 parts, b and c put whole", q)
	}
	if open, err := st.ListUploads(ctx, ""); err != nil || len(open) != 0 {
		t.Errorf("open uploads %v (%v)", open, err)
	}
}

// TestFanTargets checks bench fan's targets on hand-made medians: the
// ratios per shape and per cell, and a target whose durashuffle row was
// not run is missed, saying why.
func TestFanTargets(t *testing.T) {
	row := func(s FanShape, m int, name string, write, read float64, gets, stored, logical int64) FanRow {
		r := FanRow{Writers: s.Writers, Readers: s.Readers, Multiple: m, Contender: name}
		r.Write.Seconds, r.Read.Seconds = write, read
		r.Read.Requests = map[string]int64{"GetObject": gets}
		r.Write.StoredBytes, r.Write.LogicalBytes = stored, logical
		return r
	}
	a, b := FanShape{8, 8}, FanShape{32, 8}
	rows := []FanRow{
		row(a, 1, Durashuffle, 2, 1, 80, 100, 200),
		row(a, 1, FanSpillOff, 2, 1, 80, 100, 200),
		row(a, 1, Druid, 4, 3, 1000, 100, 200),
		row(a, 1, MapFile, 1, 1, 64, 100, 200),
		row(a, 16, Durashuffle, 20, 10, 96, 1620, 3200),
		row(a, 16, FanSpillOff, 10, 10, 900, 1600, 3200),
		row(a, 16, Druid, 40, 30, 1000, 1600, 3200),
		row(a, 16, MapFile, 25, 12, 64, 1600, 3200),
		{Writers: 32, Readers: 8, Multiple: 1, Contender: Durashuffle, NotRun: "spill key not available"},
		row(b, 1, Druid, 4, 3, 1000, 100, 200),
		row(b, 1, MapFile, 1, 1, 64, 100, 200),
	}
	got := map[string]Target{}
	for _, tg := range fanTargets(rows) {
		got[tg.Name] = tg
	}
	want := map[string]struct {
		got float64
		ok  bool
	}{
		"8x8 durashuffle: GETs per reader, 16x / 1x":               {1.2, false},
		"8x8 durashuffle: stored bytes per logical byte, 16x / 1x": {1.013, true},
		"8x8 1x: durashuffle read time / druid":                    {0.333, true},
		"8x8 1x: durashuffle read time / map-file":                 {1, true},
		"8x8 1x: durashuffle write time / map-file":                {2, false},
		"8x8 1x: durashuffle write time / spill-off":               {1, true},
		"8x8 16x: durashuffle read time / druid":                   {0.333, true},
		"8x8 16x: durashuffle read time / map-file":                {0.833, true},
		"8x8 16x: durashuffle write time / map-file":               {0.8, true},
		"8x8 16x: durashuffle write time / spill-off":              {2, false},
	}
	for name, w := range want {
		if tg, ok := got[name]; !ok || tg.Got != w.got || tg.OK != w.ok {
			t.Errorf("%q = %+v (present %v), want %.3f ok %v", name, tg, ok, w.got, w.ok)
		}
	}
	missed := 0
	for name, tg := range got {
		if strings.HasPrefix(name, "32x8") {
			missed++
			if tg.OK || !strings.Contains(name, "(durashuffle not run: spill key not available)") {
				t.Errorf("%q: ok %v", name, tg.OK)
			}
		}
	}
	if missed != 4 || len(got) != len(want)+4 {
		t.Errorf("%d targets, %d of the shape without durashuffle; want %d and 4", len(got), missed, len(want)+4)
	}
}

// TestParseFanShapes: writers x readers, both at least 1.
func TestParseFanShapes(t *testing.T) {
	got, err := ParseFanShapes("8x8, 32x8")
	if err != nil || !slices.Equal(got, []FanShape{{8, 8}, {32, 8}}) {
		t.Fatalf("%v, %v", got, err)
	}
	for _, bad := range []string{"8", "8x", "0x8", "8x-1", "ax8", ""} {
		if _, err := ParseFanShapes(bad); err == nil || !strings.Contains(err.Error(), "WRITERSxREADERS") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
