package faulttest

import (
	"context"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

// spillParts writes rows of random 1 KiB blobs (id, blob) over 8
// partitions with a 4 MiB coalesce_budget, so the runs spill and the
// object is uploaded from its file at Commit; spilledRows is their count.
const spilledRows = 32 << 10

var blobSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "blob", Type: arrow.BinaryTypes.Binary},
}, nil)

func spillConfig(cfg durashuffle.Config, t *testing.T) durashuffle.Config {
	cfg.Write.Spill, cfg.Write.SpillDir = "on", t.TempDir()
	cfg.Write.CoalesceBudget = 4 * durashuffle.MiB
	cfg.Write.FrameTargetBytes = 256 * durashuffle.KiB
	return cfg
}

// blobSum is a checksum of row id's blob, the same wherever it is made.
func blobSum(id int64) uint64 {
	r := rand.New(rand.NewPCG(uint64(id), 9))
	var s uint64
	for range 128 {
		s = s*31 + r.Uint64()
	}
	return s
}

func blobOf(id int64, b []byte) {
	r := rand.New(rand.NewPCG(uint64(id), 9))
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

func sumOf(b []byte) uint64 {
	var s uint64
	for i := 0; i < len(b); i += 8 {
		var v uint64
		for j := range 8 {
			v |= uint64(b[i+j]) << (8 * j)
		}
		s = s*31 + v
	}
	return s
}

// writeSpilled writes spilledRows rows as worker 0 of query and commits.
func writeSpilled(ctx context.Context, t *testing.T, c *durashuffle.Client, query string) *manifest.Worker {
	t.Helper()
	m, err := writeSpilledRows(ctx, c, query)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// writeSpilledRows is writeSpilled, returning its error.
func writeSpilledRows(ctx context.Context, c *durashuffle.Client, query string) (*manifest.Worker, error) {
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: 8})
	if err != nil {
		return nil, err
	}
	blob := make([]byte, 1024)
	for lo := 0; lo < spilledRows; lo += 256 {
		b := array.NewRecordBuilder(memory.DefaultAllocator, blobSchema)
		for id := int64(lo); id < int64(lo+256); id++ {
			blobOf(id, blob)
			b.Field(0).(*array.Int64Builder).Append(id)
			b.Field(1).(*array.BinaryBuilder).Append(blob)
		}
		rec := b.NewRecordBatch()
		b.Release()
		err := w.Write((lo/256)%8, rec)
		rec.Release()
		if err != nil {
			w.Abort()
			return nil, err
		}
	}
	return w.Commit(ctx)
}

// checkSpilled reads query back: every row once, with its blob.
func checkSpilled(ctx context.Context, t *testing.T, c *durashuffle.Client, query string) {
	t.Helper()
	st, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, spilledRows)
	for p := range 8 {
		rr, err := st.ReadPartitions(ctx, []int{p})
		if err != nil {
			t.Fatal(err)
		}
		for rr.Next() {
			rec := rr.RecordBatch()
			ids, blobs := rec.Column(0).(*array.Int64), rec.Column(1).(*array.Binary)
			for i := range ids.Len() {
				id := ids.Value(i)
				if id < 0 || id >= spilledRows || seen[id] {
					t.Fatalf("%s partition %d: row %d read twice or never written", query, p, id)
				}
				seen[id] = true
				if sumOf(blobs.Value(i)) != blobSum(id) {
					t.Fatalf("%s partition %d: row %d's blob differs from the one written", query, p, id)
				}
			}
		}
		err = rr.Err()
		rr.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	for id, ok := range seen {
		if !ok {
			t.Fatalf("%s: row %d not read back", query, id)
		}
	}
}

// TestSpilledPartsRetried: parts of a spilled object cut off by
// connection resets and 500s are sent again from their file on disk: the
// object is stored intact in upload_concurrency parts, and the pool
// never held a chunk buffer (no part's bytes were kept in memory for the
// retry).
func TestSpilledPartsRetried(t *testing.T) {
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) {
		cfg := spillConfig(baseConfig(), t)
		env := newEnv(t, e, cfg, faultproxy.Spec{Reset: 0.3, Internal: 0.2, Ops: []string{"UploadPart"}, Seed: 11})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		m := writeSpilled(ctx, t, env.client, "spill-retried")
		inj := env.proxies[0].Stats().Injected
		faults := inj[faultproxy.Injection{Op: "UploadPart", Fault: faultproxy.FaultReset}] + inj[faultproxy.Injection{Op: "UploadPart", Fault: faultproxy.FaultInternal}]
		t.Logf("object of %d bytes in %d parts; %d UploadPart faults injected, %d UploadPart requests", m.Objects[0].Size, m.Objects[0].Parts, faults, env.counter.Requests()["UploadPart"])
		if faults == 0 {
			t.Fatal("no UploadPart failed: the test shows no retry")
		}
		if len(m.Objects) != 1 || m.Objects[0].Parts != cfg.Write.UploadConcurrency {
			t.Fatalf("objects %+v, want one of %d parts", m.Objects, cfg.Write.UploadConcurrency)
		}
		if peak := env.client.Stats().PeakBuffered; peak != 0 {
			t.Fatalf("the pool held %d chunk buffers, want none: a retried part is read again from disk", peak)
		}
		checkSpilled(ctx, t, env.client, "spill-retried")
	})
}

// TestSpilledPartHedged: a part of a spilled object that straggles (the
// proxy holds it far longer than the test may take) is hedged, read
// again from disk, and the hedge stores it.
func TestSpilledPartHedged(t *testing.T) {
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) {
		cfg := spillConfig(hedgeConfig(t), t)
		env := newEnv(t, e, cfg, faultproxy.Spec{})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// 8 parts: past the hedger's warmup.
		writeSpilled(ctx, t, env.client, "spill-warm-1")
		writeSpilled(ctx, t, env.client, "spill-warm-2")
		s0 := env.client.Stats()
		env.proxies[0].Stall(faultproxy.Stall{Op: "UploadPart", Nth: 1, Part: 2, Delay: stallFor})
		start := time.Now()
		m := writeSpilled(ctx, t, env.client, "spill-hedged")
		took := time.Since(start)
		s1 := env.client.Stats()
		hedged, won := s1.Hedged-s0.Hedged, s1.HedgesWon-s0.HedgesWon
		t.Logf("write with part 2 stalled for %v took %v: %d parts, hedged %d, won %d", stallFor, took.Round(time.Millisecond), m.Objects[0].Parts, hedged, won)
		if stalls := env.faults().ByFault()[faultproxy.FaultStall]; stalls != 1 {
			t.Fatalf("%d requests stalled, want 1", stalls)
		}
		if took > stallFor/5 || hedged < 1 || won < 1 {
			t.Fatalf("took %v, hedged %d, won %d: want the stalled part rescued by a hedge", took, hedged, won)
		}
		checkSpilled(ctx, t, env.client, "spill-hedged")
	})
}

// TestSpilledPartStalledCancelled: a commit whose upload stalls on a part
// read from the runs' spill file, and whose caller gives up, fails: no
// manifest, object or open upload of it is left, its spill files are
// removed, a stage committed before reads back unchanged, and the next
// writer of the same client commits.
func TestSpilledPartStalledCancelled(t *testing.T) {
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) {
		cfg := spillConfig(baseConfig(), t)
		env := newEnv(t, e, cfg, faultproxy.Spec{})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		writeSpilled(ctx, t, env.client, "spill-kept")
		env.proxies[0].Stall(faultproxy.Stall{Op: "UploadPart", Nth: 1, Part: 2, Delay: stallFor})
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := writeSpilledRows(cctx, env.client, "spill-stalled")
		ccancel()
		if err == nil {
			t.Fatal("a commit whose part stalled past its caller's deadline committed")
		}
		t.Logf("commit with part 2 stalled: %.300s", err)
		prefix := env.client.Layout().StagePrefix("spill-stalled", 0)
		left := func() bool {
			ups, err := env.direct.ListUploads(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			objs, _, err := env.direct.List(ctx, prefix, "")
			if err != nil {
				t.Fatal(err)
			}
			return len(ups) != 0 || len(objs) != 0 || len(spillFilesUnder(t, cfg.Write.SpillDir)) != 0
		}
		for deadline := time.Now().Add(30 * time.Second); left(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("30 s after the cancelled commit an upload, object or spill file of it is left (spill files %v)", spillFilesUnder(t, cfg.Write.SpillDir))
			}
		}
		checkSpilled(ctx, t, env.client, "spill-kept")
		writeSpilled(ctx, t, env.client, "spill-next")
		checkSpilled(ctx, t, env.client, "spill-next")
	})
}

// spillFilesUnder lists the spill files (*.spill) under dir.
func spillFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".spill") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
