package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Plot draws the report as a PNG: stored MiB/s per contender (or per
// cell of a sweep; durashuffle-encode-only, on the null store, is left
// out), with the link limit as a line; for bench partitions,
// throughput and stored bytes against the partition count; for bench
// fan, write and read seconds per cell and contender.
func Plot(rep *Report, path string) error {
	if rep.Scenario == ScenarioPartitions {
		return plotPartitions(rep, path)
	}
	if rep.Scenario == ScenarioFastpath {
		return plotFastpath(rep, path)
	}
	if rep.Scenario == ScenarioFan {
		return plotFan(rep, path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("durashuffle bench %s", rep.Scenario)
	switch {
	case rep.Link.LimitBytesPerS > 0:
		p.Title.Text += fmt.Sprintf(" (%.0f ms, %s/s x %d connections)", rep.Link.LatencyMS, sizeString(rep.Link.ConnBandwidthBytes), rep.Link.Connections)
	case rep.Link.ConnBandwidthBytes > 0:
		p.Title.Text += fmt.Sprintf(" (%.0f ms, %s/s per connection)", rep.Link.LatencyMS, sizeString(rep.Link.ConnBandwidthBytes))
	}
	p.Y.Label.Text = "MiB/s stored"
	if rep.Scenario == ScenarioEncode || rep.Scenario == ScenarioSmallBatches {
		p.Y.Label.Text = "MiB/s logical"
	}
	if rep.Scenario == ScenarioSweep {
		return plotSweep(p, rep, path)
	}
	var vals plotter.Values
	var names []string
	for _, r := range rep.Results {
		if r.Name == DurashuffleEncodeOnly {
			continue // not over the link: its rate is the encoder's
		}
		v := r.StoredBytesPerS
		if rep.Scenario == ScenarioEncode || rep.Scenario == ScenarioSmallBatches {
			v = r.LogicalBytesPerS
		}
		if rep.Scenario == ScenarioMemory {
			v = float64(r.PeakRSSBytes)
		}
		vals = append(vals, v/(1<<20))
		names = append(names, r.Name)
	}
	if rep.Scenario == ScenarioMemory {
		p.Y.Label.Text = "peak RSS MiB"
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return err
	}
	bars.Color = color.RGBA{R: 60, G: 110, B: 180, A: 255}
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	top := 0.0
	for _, v := range vals {
		top = max(top, v)
	}
	var line float64
	label := ""
	switch {
	case rep.Scenario == ScenarioMemory && len(rep.Results) > 0:
		line, label = float64(rep.Results[0].MemoryBound)/(1<<20), "memory bound"
	case rep.Link.LimitBytesPerS > 0 && rep.Scenario != ScenarioSmallBatches:
		line, label = float64(rep.Link.LimitBytesPerS)/(1<<20), "link limit"
	}
	if line > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: line}, {X: float64(len(vals)) - 0.5, Y: line}})
		if err != nil {
			return err
		}
		l.Color = color.RGBA{R: 200, G: 40, B: 40, A: 255}
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s %.0f", label, line), l)
		p.Legend.Top = true
		top = max(top, line)
	}
	p.Y.Min, p.Y.Max = 0, top*1.15
	longest := 0
	for _, n := range names {
		longest = max(longest, len(n))
	}
	perBar := max(1.6, 0.085*float64(longest))
	return p.Save(vg.Length(max(4, perBar*float64(len(vals))))*vg.Inch, 4*vg.Inch, path)
}

func plotSweep(p *plot.Plot, rep *Report, path string) error {
	p.X.Label.Text = "upload_concurrency"
	byChunk := map[int64]plotter.XYs{}
	var chunks []int64
	limit := plotter.XYs{}
	seen := map[int]bool{}
	for _, r := range rep.Results {
		if _, ok := byChunk[r.ChunkSize]; !ok {
			chunks = append(chunks, r.ChunkSize)
		}
		byChunk[r.ChunkSize] = append(byChunk[r.ChunkSize], plotter.XY{X: float64(r.Concurrency), Y: r.StoredBytesPerS / (1 << 20)})
		if !seen[r.Concurrency] && rep.Link.ConnBandwidthBytes > 0 {
			seen[r.Concurrency] = true
			limit = append(limit, plotter.XY{X: float64(r.Concurrency), Y: float64(int64(r.Concurrency)*rep.Link.ConnBandwidthBytes) / (1 << 20)})
		}
	}
	palette := []color.Color{
		color.RGBA{R: 60, G: 110, B: 180, A: 255}, color.RGBA{R: 230, G: 140, B: 30, A: 255},
		color.RGBA{R: 40, G: 150, B: 70, A: 255}, color.RGBA{R: 130, G: 70, B: 160, A: 255},
	}
	for i, c := range chunks {
		l, s, err := plotter.NewLinePoints(byChunk[c])
		if err != nil {
			return err
		}
		l.Color, s.Color = palette[i%len(palette)], palette[i%len(palette)]
		l.Width = vg.Points(2)
		p.Add(l, s)
		p.Legend.Add("chunk "+sizeString(c), l, s)
	}
	if len(limit) > 0 {
		sortXY(limit)
		l, err := plotter.NewLine(limit)
		if err != nil {
			return err
		}
		l.Color = color.RGBA{R: 200, G: 40, B: 40, A: 255}
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(l)
		p.Legend.Add("link limit", l)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min = 0
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func sortXY(xy plotter.XYs) {
	for i := 1; i < len(xy); i++ {
		for k := i; k > 0 && xy[k].X < xy[k-1].X; k-- {
			xy[k], xy[k-1] = xy[k-1], xy[k]
		}
	}
}

// Replot redraws <scenario>.png from every <scenario>.json in dir and
// returns those reports.
func Replot(dir string) ([]*Report, error) {
	var reps []*Report
	for _, sc := range Scenarios {
		b, err := os.ReadFile(filepath.Join(dir, sc+".json"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s.json: %w", sc, err)
		}
		if err := Plot(&r, filepath.Join(dir, sc+".png")); err != nil {
			return nil, err
		}
		reps = append(reps, &r)
	}
	return reps, nil
}

// plotFastpath draws the read time of each memory store mode.
func plotFastpath(rep *Report, path string) error {
	p := plot.New()
	p.Title.Text = "durashuffle bench fastpath: read time of 4 readers"
	p.Y.Label.Text = "seconds"
	vals := make(plotter.Values, len(rep.Fastpath))
	names := make([]string, len(rep.Fastpath))
	for i, r := range rep.Fastpath {
		vals[i], names[i] = r.ReadSeconds, r.Mode
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return err
	}
	bars.Color = color.RGBA{R: 60, G: 110, B: 180, A: 255}
	p.Add(bars)
	p.NominalX(names...)
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}
