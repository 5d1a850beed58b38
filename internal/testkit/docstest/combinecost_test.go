package docstest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/uploader"
)

// costConfig is one row of combining.md's table of what combining
// costs per TiB: the writers' upload pool, the writers' objects it
// uploads from disk at once, and the plan's options.
type costConfig struct {
	writers uploader.Config // nil-valued: Druid's layout
	sharing int
	o       combine.Options
}

// writerParts is the parts of a writer's object of size bytes (spilled:
// one partition-sorted run) as its upload pool cuts it with sharing
// objects uploading from disk at once: the one place the writers' part
// count enters the table, for the uploader decides it.
func writerParts(t *testing.T, c costConfig, size int64) int64 {
	t.Helper()
	parts, _, _, _, err := uploader.PlanFileParts(c.writers, "writer object", size, c.sharing)
	if err != nil {
		t.Fatal(err)
	}
	return int64(parts)
}

// TestCombineCostTable: the table "What combining costs per TiB" in
// docs/combining.md is what combine.MakePlan predicts (the predictions
// bench combine finds exact) for its shapes, priced at combine's prices:
// every cell is computed here and must be in the document as printed.
func TestCombineCostTable(t *testing.T) {
	if testing.Short() {
		t.Skip("the 10,000 x 10,000 plans take seconds; make test runs them without -short")
	}
	const TiB = int64(1) << 40
	// The defaults: spill on, so a plan's tasks have spill_dir for
	// Scratch and its disk cap; a process runs as many writers at once
	// as it has upload connections, their objects uploading from disk
	// together (an engine's executor running several tasks), or one.
	cfg := durashuffle.DefaultConfig()
	pool := uploader.Config{Concurrency: cfg.Write.UploadConcurrency, ChunkSize: int64(cfg.Write.ChunkSize), MaxPartSize: int64(cfg.Write.MaxPartSize)}
	defaults := costConfig{writers: pool, sharing: cfg.Write.UploadConcurrency, o: combine.Options{Scratch: noScratch{}}}
	alone := defaults
	alone.sharing = 1
	cheap := costConfig{writers: uploader.Config{Concurrency: 1, ChunkSize: 8 << 20, MaxPartSize: 2 << 30}, sharing: 1, o: combine.Options{TaskCapBytes: 8 << 30, TargetGetBytes: 128 << 20, PartBytes: 1 << 30}}
	disk := cheap
	disk.o.TaskCapBytes, disk.o.Scratch = 64<<30, noScratch{}
	rows := []struct {
		name     string
		c        costConfig
		combined bool
	}{
		{"as written, defaults", defaults, false},
		{"combined, default plan", defaults, true},
		{"as written, defaults, each writer alone", alone, false},
		{"combined, default plan, each writer alone", alone, true},
		{"as written, the cheaper settings", cheap, false},
		{"combined, the cheaper settings", cheap, true},
		{"combined, the cheaper settings, tasks on disk", disk, true},
		{"Druid's layout", costConfig{}, false},
	}
	doc, err := os.ReadFile(repoFile(t, "docs/combining.md"))
	if err != nil {
		t.Fatal(err)
	}
	s3, err := combine.PricesOf("s3")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		line := "| " + r.name + " |"
		for _, n := range []int{1000, 10000} {
			tib := int64(n / 1000) // the stage's TiB: 1 GiB per writer
			p, err := combine.MakePlan(uniformStage(n, n, tib*TiB), r.c.o)
			if err != nil {
				t.Fatal(err)
			}
			pr := p.Predict
			if r.c.writers.Concurrency == 0 { // Druid's: an object per writer and partition, a GET per writer per reader
				put, get := int64(n)*int64(n), int64(n)*int64(n)
				dollars := s3.Dollars(combine.Requests{GET: get, PUT: put}) / float64(tib)
				line += fmt.Sprintf(" %s + %s: **$%.3f** |", count(put/tib), count(get/tib), dollars)
				continue
			}
			// Each writer: its parts, the create and the complete, and its
			// manifest's conditional put.
			put := int64(n) * (writerParts(t, r.c, tib*TiB/int64(n)) + 3)
			get := pr.Direct.GET
			if r.combined {
				put += pr.Combine.PUT
				get = pr.Combine.GET + pr.Combined.GET
			}
			dollars := s3.Dollars(combine.Requests{GET: get, PUT: put}) / float64(tib)
			line += fmt.Sprintf(" %s + %s: **$%.3f** |", count(put/tib), count(get/tib), dollars)
			// The target at the defaults: a combined stage at most $0.05
			// per TiB, the writers' requests at most $0.02 of it.
			if r.name == "combined, default plan" {
				writers := s3.Dollars(combine.Requests{PUT: int64(n) * (writerParts(t, r.c, tib*TiB/int64(n)) + 3)}) / float64(tib)
				if dollars > 0.05 || writers > 0.02 {
					t.Errorf("%d x %d at the defaults: $%.4f per TiB combined, the writers' $%.4f; want at most $0.05 and $0.02", n, n, dollars, writers)
				}
			}
			if r.combined {
				line = strings.TrimSuffix(line, " |") + fmt.Sprintf(" (%d x %d) |", len(p.Groups), len(p.Buckets))
			}
		}
		if !strings.Contains(string(doc), line+"\n") {
			t.Errorf("docs/combining.md lacks the row\n%s", line)
		}
	}
	// The same layouts priced on each store: its PUT-class requests as its
	// uploads make them (combine.Prices.UploadWrites, Plan.PredictOn), the
	// GETs the same on every store.
	var stores []combine.Prices
	for _, kind := range []string{"s3", "azure", "gcs"} {
		p, err := combine.PricesOf(kind)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, p)
	}
	for _, r := range rows {
		line := "| " + r.name + " |"
		for _, n := range []int{1000, 10000} {
			tib := int64(n / 1000)
			p, err := combine.MakePlan(uniformStage(n, n, tib*TiB), r.c.o)
			if err != nil {
				t.Fatal(err)
			}
			for _, prices := range stores {
				var put, get int64
				switch {
				case r.c.writers.Concurrency == 0:
					put, get = int64(n)*int64(n), int64(n)*int64(n)
				default:
					pr := p.PredictOn(prices)
					put = int64(n) * (prices.UploadWrites(writerParts(t, r.c, tib*TiB/int64(n))) + 1)
					get = pr.Direct.GET
					if r.combined {
						put += pr.Combine.PUT
						get = pr.Combine.GET + pr.Combined.GET
					}
				}
				line += fmt.Sprintf(" %s: **$%.3f** |", count(put/tib), prices.Dollars(combine.Requests{GET: get, PUT: put})/float64(tib))
			}
		}
		if !strings.Contains(string(doc), line+"\n") {
			t.Errorf("docs/combining.md lacks the row of the table by store\n%s", line)
		}
	}
}

// uniformStage is a stage of W workers of one object each and P
// partitions of equal bytes, b bytes in all.
func uniformStage(W, P int, b int64) combine.Input {
	in := combine.Input{Query: "q", Partitions: P, IndexKey: "index-x.bin", PartitionBytes: make([]int64, P)}
	for p := range P {
		in.PartitionBytes[p] = b / int64(P)
	}
	for w := range W {
		in.Workers = append(in.Workers, combine.WorkerInput{ID: fmt.Sprint(w), Objects: []int64{b / int64(W)}})
	}
	return in
}

// count prints n as the tables do: 11,000; 1.00 M from a million.
func count(n int64) string {
	if n >= 1_000_000 {
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// noScratch stands for a spill directory in plans that are never run.
type noScratch struct{}

func (noScratch) Create(int64, string) (combine.ScratchFile, error) { return nil, nil }
