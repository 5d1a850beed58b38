package e2e_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// dataGets counts the ranged GETs of data objects.
type dataGets struct {
	store.Store
	n atomic.Int64
}

func (s *dataGets) Unwrap() store.Store { return s.Store }

func (s *dataGets) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if strings.Contains(key, "/data-") {
		s.n.Add(1)
	}
	return s.Store.GetRange(ctx, key, off, length)
}

// TestSpillOneRunPerObject: writers whose output is many times their
// coalesce_budget store one partition-sorted run per object with spill
// on: a reader of a partition range makes at most one data GET per
// writer object per read_range_bytes of what it reads, as for a writer
// whose output fit its budget, and the stored bytes do not grow with the
// runs; with spill off the same stage costs a GET per run. The spill
// directory holds nothing once the writers commit.
func TestSpillOneRunPerObject(t *testing.T) {
	const (
		writers    = 3
		partitions = 64
		readers    = 4
		rows       = 12_288 // about 12 MiB per writer, 192 rows per partition
	)
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		type outcome struct {
			gets   []int64 // data GETs per reader
			stored int64
			runs   int // ascending runs of partitions in worker 0's frames
		}
		spillRoot := t.TempDir()
		run := func(query, spill string, budget durashuffle.Size) outcome {
			ctx := context.Background()
			cfg := testConfig()
			cfg.Write.Spill, cfg.Write.SpillDir, cfg.Write.CoalesceBudget = spill, spillRoot, budget
			gets := &dataGets{Store: st}
			c := testenv.Client(t, cfg, durashuffle.WithStore(gets), durashuffle.WithCounter(counter))
			defer c.Close()
			var out outcome
			for wk := range writers {
				w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: fmt.Sprint(wk), Partitions: partitions})
				if err != nil {
					t.Fatal(err)
				}
				// Batches of 16 rows over every partition in turn: each
				// run holds a piece of every partition.
				for lo := 0; lo < rows; lo += 16 {
					rec := batch(lo, 16)
					err := w.Write((lo/16)%partitions, rec)
					rec.Release()
					if err != nil {
						t.Fatal(err)
					}
				}
				m, err := w.Commit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				out.stored += m.Totals.BytesStored
				if wk == 0 {
					out.runs = ascending(m)
				}
			}
			if _, err := c.Seal(ctx, query, 0, writers); err != nil {
				t.Fatal(err)
			}
			stage, err := c.OpenStage(ctx, query, 0)
			if err != nil {
				t.Fatal(err)
			}
			per := partitions / readers
			for r := range readers {
				ps := make([]int, per)
				for i := range ps {
					ps[i] = r*per + i
				}
				before := gets.n.Load()
				rr, err := stage.ReadPartitions(ctx, ps)
				if err != nil {
					t.Fatal(err)
				}
				var n int64
				for rr.Next() {
					n += rr.RecordBatch().NumRows()
				}
				if err := rr.Err(); err != nil {
					t.Fatal(err)
				}
				rr.Release()
				if want := int64(writers * rows / readers); n != want {
					t.Fatalf("%s reader %d: %d rows, want %d", query, r, n, want)
				}
				out.gets = append(out.gets, gets.n.Load()-before)
			}
			return out
		}
		fits := run("fits", "on", 64*durashuffle.MiB)
		spilled := run("spilled", "on", 1*durashuffle.MiB)
		off := run("off", "off", 1*durashuffle.MiB)
		t.Logf("data GETs per reader: output within budget %v, spilled %v, spill off %v; stored %d, %d, %d bytes; worker 0's runs as stored %d, %d, %d",
			fits.gets, spilled.gets, off.gets, fits.stored, spilled.stored, off.stored, fits.runs, spilled.runs, off.runs)
		if spilled.runs != 1 || off.runs < 8 {
			t.Fatalf("runs as stored: %d with spill (want 1), %d without (want at least 8)", spilled.runs, off.runs)
		}
		// Each reader reads a quarter of each writer's ~12 MiB: 3 MiB,
		// under read_range_bytes, so one GET per writer object.
		for r, n := range spilled.gets {
			if n > writers || n > fits.gets[r] {
				t.Fatalf("reader %d made %d data GETs with spill, want at most %d (one per writer) and no more than the fitting output's %d", r, n, writers, fits.gets[r])
			}
			if off.gets[r] < 4*n {
				t.Fatalf("reader %d: %d data GETs with spill off against %d with spill: the multi-run layout should cost a GET per run", r, off.gets[r], n)
			}
		}
		if ratio := float64(spilled.stored) / float64(fits.stored); ratio > 1.03 {
			t.Fatalf("spilled output stores %.3fx the bytes of the output that fit, want at most 1.03x", ratio)
		}
		leftovers, _ := filepath.Glob(filepath.Join(spillRoot, "*", "*.spill"))
		dirs, _ := os.ReadDir(spillRoot)
		if len(leftovers) != 0 || len(dirs) != 0 {
			t.Fatalf("after the clients closed, spill_dir holds %d entries and spill files %v", len(dirs), leftovers)
		}
	})
}

// ascending counts the runs of ascending partitions in m's frames, as
// its first object stores them.
func ascending(m *manifest.Worker) int {
	frames := append([]manifest.Frame(nil), m.Frames...)
	// The manifest lists frames by partition: put them back in the
	// object's byte order.
	slices.SortFunc(frames, func(a, b manifest.Frame) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(a.Offset, b.Offset))
	})
	runs := 1
	for i := 1; i < len(frames); i++ {
		if frames[i].Partition < frames[i-1].Partition {
			runs++
		}
	}
	return runs
}
