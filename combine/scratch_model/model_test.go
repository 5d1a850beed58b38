package scratch

import (
	"fmt"
	"testing"

	"github.com/durashuffle/durashuffle/combine"
)

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

func TestModel(t *testing.T) {
	const TiB = int64(1) << 40
	for _, sh := range []int{1000, 10000} {
		stage := TiB * int64(sh/1000)
		per := float64(sh / 1000)
		for _, c := range []struct {
			name        string
			o           combine.Options
			writerParts int64
		}{
			{"default", combine.Options{}, 8},
			{"cap2G", combine.Options{TaskCapBytes: 2 << 30}, 8},
			{"cost: uc2 cap2G part512 rr64 k64", combine.Options{TaskCapBytes: 2 << 30, PartBytes: 512 << 20, ReaderRangeBytes: 64 << 20, TargetGetBytes: 64 << 20}, 2},
			{"cost: uc2 cap4G part512 rr64 k64", combine.Options{TaskCapBytes: 4 << 30, PartBytes: 512 << 20, ReaderRangeBytes: 64 << 20, TargetGetBytes: 64 << 20}, 2},
			{"cost: uc1 cap4G part1G rr64 k64", combine.Options{TaskCapBytes: 4 << 30, PartBytes: 1 << 30, ReaderRangeBytes: 64 << 20, TargetGetBytes: 64 << 20}, 1},
			{"cost: uc2 cap8G part1G rr64 k128", combine.Options{TaskCapBytes: 8 << 30, PartBytes: 1 << 30, ReaderRangeBytes: 64 << 20, TargetGetBytes: 128 << 20}, 2},
		} {
			p, err := combine.MakePlan(uniform(sh, sh, stage), c.o)
			if err != nil {
				t.Fatal(err)
			}
			wput := int64(sh) * (c.writerParts + 3)
			pr := p.Predict
			d := func(get, put int64) float64 { return (float64(get)*combine.PriceGET + float64(put)*combine.PricePUT) / per }
			t.Logf("%d %s: G=%d J=%d writers PUT/TiB %.0f ($%.3f); direct GET/TiB %.0f ($%.3f); combine GET %.0f PUT %.0f ($%.3f); combined GET %.0f ($%.3f); TOTAL combined $%.3f direct $%.3f",
				sh, c.name, len(p.Groups), len(p.Buckets), float64(wput)/per, d(0, wput), float64(pr.Direct.GET)/per, d(pr.Direct.GET, 0),
				float64(pr.Combine.GET)/per, float64(pr.Combine.PUT)/per, d(pr.Combine.GET, pr.Combine.PUT), float64(pr.Combined.GET)/per, d(pr.Combined.GET, 0),
				d(0, wput)+d(pr.Combine.GET, pr.Combine.PUT)+d(pr.Combined.GET, 0), d(0, wput)+d(pr.Direct.GET, 0))
		}
	}
}
