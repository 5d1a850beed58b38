package faulttest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// EnvSoakRuns sets how many seeded runs the fault matrix makes (make soak
// sets 20). Unset: defaultRuns, few enough for make test.
const EnvSoakRuns = "DURASHUFFLE_SOAK_RUNS"

const defaultRuns = 3

// matrixSpecs are the fault mix, as two chained proxies: the first, on
// every request, 10% SlowDown, 2% 500, 2% resets while the request body
// is in flight and 1% latency spikes; the second cuts short 1% of all
// response bodies (objects read back, and the answers to Create,
// Complete and listings). Seeds are set per run.
var matrixSpecs = []faultproxy.Spec{
	{SlowDown: 0.10, Internal: 0.02, Reset: 0.02, Spike: 0.01, SpikeDelay: 200 * time.Millisecond},
	{Truncate: 0.01},
}

// TestFaultMatrix writes, seals and reads back a 3-worker x 8-partition
// stage (about 13 MiB of stored data per worker: 3 multipart parts each)
// through the fault proxy, once per seed. Every run must commit and seal,
// every partition must read back with the rows and content hash written,
// and no multipart upload may be left open.
func TestFaultMatrix(t *testing.T) {
	runs := defaultRuns
	if v := os.Getenv(EnvSoakRuns); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of runs", EnvSoakRuns, v)
		}
		runs = n
	}
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) {
		var (
			faults  faultproxy.Stats
			retries = map[store.OpReason]int64{}
			reqs    = map[string]int64{}
			lostAll int64
			open    int
			rows    int64
			stored  int64
			hedges  int64
			elapsed time.Duration
		)
		for run := 1; run <= runs; run++ {
			specs := slices.Clone(matrixSpecs)
			for i := range specs {
				specs[i].Seed = uint64(run*len(specs) + i)
			}
			spec := fmt.Sprint(specs)
			t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				env := newEnv(t, e, baseConfig(), specs...)
				s := stage{query: fmt.Sprintf("matrix-%d", run), workers: 3, partitions: 8, rows: 600_000, seed: uint64(run)}
				start := time.Now()
				want, err := s.write(ctx, env.client)
				if err != nil {
					t.Fatalf("write under faults %s: %v\nfaults: %v\nretries: %v", spec, err, env.faults(), env.counter.Retries())
				}
				got, err := s.read(ctx, env.client)
				if err != nil {
					t.Fatalf("read under faults %s: %v\nfaults: %v\nretries: %v", spec, err, env.faults(), env.counter.Retries())
				}
				d := time.Since(start)
				n := lost(want, got)
				for p := range want {
					if want[p] != got[p] {
						t.Errorf("partition %d: wrote %d rows (hash %016x), read %d (hash %016x)", p, want[p].Rows, want[p].Sum, got[p].Rows, got[p].Sum)
					}
				}
				ups, err := env.direct.ListUploads(ctx, "")
				if err != nil {
					t.Fatal(err)
				}
				for _, u := range ups {
					t.Errorf("multipart upload left open: %s (%s)", u.Key, u.UploadID)
				}
				st := env.faults()
				if st.Total() == 0 {
					t.Error("no fault was injected")
				}
				m, err := manifest.LoadStage(ctx, env.direct, env.client.Layout(), s.query, 0)
				if err != nil {
					t.Fatal(err)
				}
				if m.Totals.Parts < 2*s.workers {
					t.Errorf("%d parts for %d workers: the stage is too small to exercise multipart uploads", m.Totals.Parts, s.workers)
				}
				ph := env.client.Stats().Hedged
				rh := env.client.Stats().ReadsHedged
				t.Logf("%s: %d rows, %.1f MiB in %d parts, %d frames, written and read in %v; %v; retries %s; hedged %d parts, %d reads; lost %d; open uploads %d",
					spec, m.Totals.Rows, float64(m.Totals.BytesStored)/(1<<20), m.Totals.Parts, m.Totals.Frames, d.Round(time.Millisecond),
					st, formatRetries(env.counter.Retries()), ph, rh, n, len(ups))
				written := m.Totals.Rows
				hedges += ph + rh
				stored += m.Totals.BytesStored
				faults = faults.Add(st)
				for k, v := range env.counter.Retries() {
					retries[k] += v
				}
				for k, v := range env.counter.Requests() {
					reqs[k] += v
				}
				lostAll += n
				open += len(ups)
				rows += written
				elapsed += d
			})
		}
		t.Logf("FAULT MATRIX: %d runs, %d rows, %.0f MiB stored, %v writing and reading", runs, rows, float64(stored)/(1<<20), elapsed.Round(time.Millisecond))
		t.Logf("  faults injected: %v", faults)
		t.Logf("  client requests: %s", formatCounts(reqs))
		t.Logf("  retries per operation: %s", formatRetries(retries))
		t.Logf("  hedged requests: %d", hedges)
		t.Logf("  data lost: %d rows; open multipart uploads left: %d", lostAll, open)
	})
}

func formatCounts(m map[string]int64) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// formatRetries renders retries as "UploadPart 12 (SlowDown 9, reset 3), ...".
func formatRetries(m map[store.OpReason]int64) string {
	byOp := map[string]map[string]int64{}
	total := map[string]int64{}
	for k, v := range m {
		if byOp[k.Op] == nil {
			byOp[k.Op] = map[string]int64{}
		}
		byOp[k.Op][k.Reason] += v
		total[k.Op] += v
	}
	if len(total) == 0 {
		return "none"
	}
	ops := slices.SortedFunc(maps.Keys(total), func(a, b string) int { return cmp.Or(cmp.Compare(total[b], total[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(ops))
	for i, op := range ops {
		reasons := slices.Sorted(maps.Keys(byOp[op]))
		rs := make([]string, len(reasons))
		for j, r := range reasons {
			rs[j] = fmt.Sprintf("%s %d", r, byOp[op][r])
		}
		parts[i] = fmt.Sprintf("%s %d (%s)", op, total[op], strings.Join(rs, ", "))
	}
	return strings.Join(parts, "; ")
}
