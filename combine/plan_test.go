package combine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/combine"
)

const MiB = 1 << 20

// uniform is a stage of W workers of one object each and P partitions
// of equal bytes, b bytes in all.
func uniform(W, P int, b int64) combine.Input {
	in := combine.Input{Query: "q", Partitions: P, IndexKey: "index-x.bin", PartitionBytes: make([]int64, P)}
	for p := range P {
		in.PartitionBytes[p] = b / int64(P)
	}
	for w := range W {
		in.Workers = append(in.Workers, combine.WorkerInput{ID: fmt.Sprint(w), Objects: []int64{b / int64(W)}})
	}
	return in
}

func TestPlanSizes(t *testing.T) {
	const GiB = 1 << 30
	for _, c := range []struct {
		name   string
		in     combine.Input
		o      combine.Options
		g, j   int
		pays   bool
		over   int
		direct int64 // readers' GETs as written
	}{
		// Small: one task; 16 readers x (2 + 16 objects) GETs against
		// 24 GETs and 6 PUTs to combine and 16 x 3 to read: it pays.
		{"16x16 of 16 MiB", uniform(16, 16, 16*MiB), combine.Options{}, 1, 1, true, 0, 16 * 18},
		// Fewer readers than that: 6 PUTs cost more than the GETs saved.
		{"4x6 of 1 MiB", uniform(4, 6, MiB), combine.Options{}, 1, 1, false, 0, 6 * 6},
		// J = B / (W x K) = 1 TiB / (1000 x 32 MiB) = 33 (rounded up);
		// G = B / (R x K) = 33 as well; tasks of 1 GiB under a 2 GiB cap.
		{"1000x1000 of 1 TiB", uniform(1000, 1000, 1<<40), combine.Options{TaskCapBytes: 2 * GiB}, 33, 33, true, 0, 1000 * (2 + 1000)},
		// Under the default cap of 512 MiB, both rise alike (W = R):
		// buckets of at most 21 partitions by groups of at most 22
		// workers, 508 MiB.
		{"1000x1000 of 1 TiB, default cap", uniform(1000, 1000, 1<<40), combine.Options{}, 46, 47, true, 0, 1000 * (2 + 1000)},
		// J = 21 and G = 3 by size; under a cap of 256 MiB J, which
		// costs W = 100 GETs a bucket, rises more than G, which costs R
		// = 1000 (J only as far as G's rise leaves it to): at most 22
		// partitions by 17 workers, 245 MiB.
		{"cap raises J", uniform(100, 1000, 64*GiB), combine.Options{TaskCapBytes: 256 * MiB}, 6, 46, true, 0, 1000 * (2 + 100)},
		// W > R: groups rise instead, from 205 (up to 5 workers, 111 MiB
		// of a bucket of 34 partitions) to groups of 3 workers: readers
		// make 40,340 GETs instead of 100,020, for 9,380 GETs and 2,692
		// PUTs: it pays, barely.
		{"cap raises G", uniform(1000, 100, 64*GiB), combine.Options{Readers: 10, TaskCapBytes: 64 * MiB, ReaderSpanBytes: 8 * MiB}, 336, 4, true, 0, 0},
		// Forced sizes are kept, even over the cap; 1 GiB tasks of 64
		// parts cost more PUTs than the GETs they save.
		{"forced", uniform(10, 10, 10*GiB), combine.Options{Groups: 2, Buckets: 5, TaskCapBytes: 512 * MiB}, 2, 5, false, 10, 10 * (2 + 10*2)},
		// G and J stop at workers and partitions.
		{"capped by shape", uniform(4, 3, 64*GiB), combine.Options{TaskCapBytes: 1 * GiB}, 4, 3, false, 12, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := combine.MakePlan(c.in, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Groups) != c.g || len(p.Buckets) != c.j || p.Tasks() != c.g*c.j {
				t.Fatalf("G=%d J=%d, want %d and %d", len(p.Groups), len(p.Buckets), c.g, c.j)
			}
			if len(p.OverCap) == 0 {
				for n, b := range p.TaskBytes {
					if b > p.Bytes/int64(p.Tasks())*2 || (c.o.TaskCapBytes > 0 && b > c.o.TaskCapBytes) {
						t.Errorf("task %d of %d bytes, %d on average", n, b, p.Bytes/int64(p.Tasks()))
					}
				}
			}
			if p.Predict.Pays != c.pays || len(p.OverCap) != c.over {
				t.Errorf("pays %v (want %v), %d tasks over the cap (want %d): %+v", p.Predict.Pays, c.pays, len(p.OverCap), c.over, p.Predict)
			}
			if c.direct != 0 && p.Predict.Direct.GET != c.direct {
				t.Errorf("direct GETs %d, want %d", p.Predict.Direct.GET, c.direct)
			}
			// Buckets and groups cover partitions and workers, contiguous.
			for _, x := range []struct {
				rs []combine.Range
				n  int
			}{{p.Buckets, c.in.Partitions}, {p.Groups, len(c.in.Workers)}} {
				at := 0
				for _, r := range x.rs {
					if r.Lo != at || r.Hi <= r.Lo {
						t.Fatalf("ranges %v do not tile [0, %d)", x.rs, x.n)
					}
					at = r.Hi
				}
				if at != x.n {
					t.Fatalf("ranges %v do not tile [0, %d)", x.rs, x.n)
				}
			}
			var sum int64
			for _, b := range p.TaskBytes {
				sum += b
			}
			if sum < p.Bytes*99/100 || sum > p.Bytes*101/100 {
				t.Errorf("tasks hold %d of %d bytes", sum, p.Bytes)
			}
		})
	}
}

// TestPlanPrediction: at 1,000 x 1,000 and 1 TiB, direct reading is one
// GET per reader and writer object (about W x R, 1M), combined W x J +
// R x G plus metadata; the dollars follow.
func TestPlanPrediction(t *testing.T) {
	p, err := combine.MakePlan(uniform(1000, 1000, 1<<40), combine.Options{TaskCapBytes: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	pr := p.Predict
	t.Logf("1000 x 1000, 1 TiB: G=%d J=%d: direct %+v $%.3f; combine %+v + combined %+v = $%.3f",
		len(p.Groups), len(p.Buckets), pr.Direct, s3Dollars(t, pr.Direct), pr.Combine, pr.Combined, s3Dollars(t, pr.Combine)+s3Dollars(t, pr.Combined))
	W, R, G, J := int64(1000), int64(1000), int64(len(p.Groups)), int64(len(p.Buckets))
	if pr.Direct.GET != R*(2+W) {
		t.Errorf("direct %d GETs, want %d", pr.Direct.GET, R*(2+W))
	}
	// Each reader's partition of a task is 1 TiB / 1000 / 33 groups of
	// 30 or 31 workers, 31 or 32.5 MiB: one GET of up to 64 MiB
	// (read_span_bytes) each.
	if want := R * (2 + G); pr.Combined.GET != want {
		t.Errorf("combined readers %d GETs, want %d", pr.Combined.GET, want)
	}
	// With a GET per 8 MiB range (read_span_bytes at read_range_bytes),
	// 4 or 5 GETs each.
	p8, err := combine.MakePlan(uniform(1000, 1000, 1<<40), combine.Options{TaskCapBytes: 2 << 30, ReaderSpanBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi, got := R*2+R*G*4, R*2+R*G*5, p8.Predict.Combined.GET; got < lo || got > hi {
		t.Errorf("combined readers in GETs of 8 MiB: %d GETs, want %d to %d", got, lo, hi)
	}
	// Tasks: W x J data GETs, 2 metadata GETs each; the seal 2 per task.
	if want := 3 + W*J + 2*G*J + 1 + 2*G*J; pr.Combine.GET != want {
		t.Errorf("combining %d GETs, want %d", pr.Combine.GET, want)
	}
	if d, c := s3Dollars(t, pr.Direct), s3Dollars(t, pr.Combine)+s3Dollars(t, pr.Combined); !(c < d/2) || !pr.Pays {
		t.Errorf("direct $%.2f, combined $%.2f", d, c)
	}
}

func TestPlanRefuses(t *testing.T) {
	for _, c := range []struct {
		in   combine.Input
		o    combine.Options
		want string
	}{
		{uniform(4, 4, MiB), combine.Options{Buckets: 5}, "5 buckets and 0 groups asked for; at most 4 buckets (partitions) and 4 groups (workers)"},
		{uniform(4, 4, MiB), combine.Options{Groups: 9}, "at most 4 buckets (partitions) and 4 groups (workers)"},
		{combine.Input{Query: "q", Partitions: 3, PartitionBytes: []int64{1}}, combine.Options{}, "3 partitions with 1 partition sizes"},
		{combine.Input{Query: "q", Partitions: 1, PartitionBytes: []int64{1}}, combine.Options{}, "no workers"},
		{uniform(4, 4, 1<<62), combine.Options{}, "need at least 8589934592 tasks of at most 536870912 bytes (TaskCapBytes), more than the 1048576 a plan may have"},
		{uniform(2000, 2000, 1<<40), combine.Options{Groups: 2000, Buckets: 2000}, "2000 buckets x 2000 groups asked for, 4000000 tasks, more than the 1048576"},
	} {
		_, err := combine.MakePlan(c.in, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("plan %+v: %v, want %q", c.o, err, c.want)
		}
	}
}

// TestPlanParts: a plan of fewer tasks than Uploads cuts each object in
// about Uploads parts (none under 5 MiB), one of more tasks in parts of
// PartBytes; the predicted PUT-class requests count them: per task its
// parts, the create and the complete (or one put), its manifest; then
// the seal's five (two LISTs, three puts).
func TestPlanParts(t *testing.T) {
	for _, c := range []struct {
		name string
		in   combine.Input
		o    combine.Options
		put  int64
	}{
		// One task of 260 MiB: 32 parts of 8.1 MiB, not 3 of 128.
		{"one task, 32 parts", uniform(64, 64, 260*MiB), combine.Options{}, 2 + 32 + 1 + 5},
		// One task of 20 MiB: parts of 5 MiB at least, so 4.
		{"one small task, 4 parts", uniform(64, 64, 20*MiB), combine.Options{}, 2 + 4 + 1 + 5},
		// One task of 4 MiB: one put.
		{"one put", uniform(64, 64, 4*MiB), combine.Options{}, 1 + 1 + 5},
		// Four uploads: 260 MiB in 4 parts of 65 MiB.
		{"four uploads", uniform(64, 64, 260*MiB), combine.Options{Uploads: 4}, 2 + 4 + 1 + 5},
		// Eight tasks of 32.5 MiB, fewer than Uploads: 7 parts of 5 MiB
		// at least each.
		{"eight tasks", uniform(64, 64, 260*MiB), combine.Options{Buckets: 8}, 8*(2+7+1) + 5},
		// Thirty-two tasks of 8.1 MiB, as many as Uploads: one put each.
		{"thirty-two tasks", uniform(64, 64, 260*MiB), combine.Options{Buckets: 32}, 32*(1+1) + 5},
		// Thirty-two tasks of 600 MiB under parts of 1 GiB: one put each
		// in memory; laid out on disk (over MemoryBytes, with Scratch),
		// two parts of 300 MiB each, as a file object is never one put.
		{"in memory", uniform(64, 64, 32*600*MiB), combine.Options{Groups: 1, Buckets: 32, PartBytes: 1 << 30, TaskCapBytes: 1 << 30}, 32*(1+1) + 5},
		{"on disk", uniform(64, 64, 32*600*MiB), combine.Options{Groups: 1, Buckets: 32, PartBytes: 1 << 30, TaskCapBytes: 1 << 30, Scratch: noScratch{}}, 32*(2+2+1) + 5},
		// Thirty-two tasks of 3 GiB on disk at the default part sizes:
		// three parts of 1 GiB each (DefaultDiskPartBytes), where in
		// memory they would be 24 of 128 MiB.
		{"on disk, default parts", uniform(64, 64, 32*3<<30), combine.Options{Groups: 1, Buckets: 32, Scratch: noScratch{}}, 32*(2+3+1) + 5},
		{"in memory, default parts", uniform(64, 64, 32*3<<30), combine.Options{Groups: 1, Buckets: 32, TaskCapBytes: 4 << 30}, 32*(2+24+1) + 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := combine.MakePlan(c.in, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Predict.Combine.PUT; got != c.put {
				t.Fatalf("%d tasks of %v bytes: %d PUT-class requests predicted, want %d", p.Tasks(), p.TaskBytes, got, c.put)
			}
		})
	}
}

// noScratch is a Scratch for plans that are never run.
type noScratch struct{}

func (noScratch) Create(int64, string) (combine.ScratchFile, error) { return nil, nil }

// TestPlanSpreadReads: a reader of one partition held by fewer sources
// than read_ahead spreads it over read_ahead GETs of at least 1 MiB, and
// the plan counts them: 64 partitions of 4 MiB combined into one object
// are 64 x (2 + 4) GETs, read as written from 64 writers 64 x (2 + 64);
// partitions of 64 KiB are one GET per source.
func TestPlanSpreadReads(t *testing.T) {
	for _, c := range []struct {
		name             string
		in               combine.Input
		direct, combined int64
	}{
		{"4 MiB partitions", uniform(64, 64, 256*MiB), 64 * (2 + 64), 64 * (2 + 4)},
		{"64 KiB partitions", uniform(64, 64, 4*MiB), 64 * (2 + 64), 64 * (2 + 1)},
		{"2.5 MiB partitions, 2 groups", uniform(64, 64, 160*MiB), 64 * (2 + 64), 64 * (2 + 2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A GET per range (read_span_bytes at read_range_bytes): the
			// ranges a partition is cut into are GETs of their own.
			o := combine.Options{ReaderSpanBytes: 8 * MiB}
			if c.name == "2.5 MiB partitions, 2 groups" {
				o.Groups = 2
			}
			p, err := combine.MakePlan(c.in, o)
			if err != nil {
				t.Fatal(err)
			}
			if pr := p.Predict; pr.Direct.GET != c.direct || pr.Combined.GET != c.combined {
				t.Fatalf("G=%d: predicted %d GETs as written and %d combined, want %d and %d", len(p.Groups), pr.Direct.GET, pr.Combined.GET, c.direct, c.combined)
			}
		})
	}
}

// TestPlanOnDiskAimsAtTheFloor: given Scratch and no TargetGetBytes, a
// stage whose tasks at 32 MiB GETs would be laid out on disk is cut in
// the fewest tasks under the disk cap, G x J balanced, and costs fewer
// requests than the plan that aims for 32 MiB GETs; a stage whose tasks
// fit in memory keeps the plan it has without Scratch.
func TestPlanOnDiskAimsAtTheFloor(t *testing.T) {
	const GiB = 1 << 30
	for _, c := range []struct {
		name string
		in   combine.Input
		g, j int
	}{
		// 1 TiB / 16 GiB = 64 tasks: 8 x 8 (at 32 MiB GETs, 33 x 33
		// tasks of 1 GiB, on disk).
		{"1000x1000 of 1 TiB", uniform(1000, 1000, 1<<40), 8, 8},
		// 10 TiB / 16 GiB = 640 tasks: 26 x 25, balanced (W = R).
		{"10000x10000 of 10 TiB", uniform(10000, 10000, 10<<40), 25, 26},
		// 64 GiB over 100 writers and 1000 readers: J costs W = 100 GETs
		// a bucket and G costs R = 1000, so G stays 1 and J is the 4
		// tasks the cap needs.
		{"100x1000 of 64 GiB", uniform(100, 1000, 64*GiB), 1, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			floor, err := combine.MakePlan(c.in, combine.Options{Scratch: noScratch{}})
			if err != nil {
				t.Fatal(err)
			}
			k, err := combine.MakePlan(c.in, combine.Options{Scratch: noScratch{}, TargetGetBytes: combine.DefaultTargetGetBytes})
			if err != nil {
				t.Fatal(err)
			}
			if len(floor.Groups) != c.g || len(floor.Buckets) != c.j {
				t.Fatalf("G=%d J=%d, want %d and %d", len(floor.Groups), len(floor.Buckets), c.g, c.j)
			}
			for n, b := range floor.TaskBytes {
				if b > combine.DefaultDiskTaskCapBytes {
					t.Fatalf("task %d of %d bytes, over the disk cap", n, b)
				}
			}
			cost := func(p *combine.Plan) float64 {
				return s3Dollars(t, p.Predict.Combine) + s3Dollars(t, p.Predict.Combined)
			}
			if cost(floor) >= cost(k) || floor.Tasks() >= k.Tasks() {
				t.Errorf("%d tasks cost $%.2f; at 32 MiB GETs %d tasks cost $%.2f", floor.Tasks(), cost(floor), k.Tasks(), cost(k))
			}
		})
	}
	// In memory at 32 MiB GETs: 2 x 2 tasks of 256 MiB, with Scratch as
	// without.
	small := uniform(16, 16, GiB)
	b, err := combine.MakePlan(small, combine.Options{Scratch: noScratch{}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := combine.MakePlan(small, combine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != c.ID || b.Tasks() != 4 {
		t.Errorf("tasks in memory: %d x %d with Scratch, %d x %d without; want 2 x 2 both",
			len(b.Groups), len(b.Buckets), len(c.Groups), len(c.Buckets))
	}
}

// TestPlanOfAStageThatExists: the bound on a prediction's work holds for
// the sizes a request expects, not for a stage that exists: 10,000
// workers of 4 objects each by 10,000 partitions, 10 TiB (6 x 10^8 steps
// to predict, over the bound of an expected stage) is planned.
func TestPlanOfAStageThatExists(t *testing.T) {
	in := uniform(10_000, 10_000, 10<<40)
	for w := range in.Workers {
		o := in.Workers[w].Objects[0] / 4
		in.Workers[w].Objects = []int64{o, o, o, o}
	}
	p, err := combine.MakePlan(in, combine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tasks() < 10_000 {
		t.Fatalf("%d tasks for 10 TiB", p.Tasks())
	}
}

// s3Dollars prices r at S3's list prices, as the plans' predictions are.
func s3Dollars(t *testing.T, r combine.Requests) float64 {
	t.Helper()
	s3, err := combine.PricesOf("s3")
	if err != nil {
		t.Fatal(err)
	}
	return s3.Dollars(r)
}
