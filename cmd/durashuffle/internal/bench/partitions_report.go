package bench

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// partitionsColumns are the columns of bench partitions' table, as text
// and Markdown print it. "tm" is transfermanager.
var partitionsColumns = []string{
	"P", "writers", "write s", "write logical MiB/s", "write stored MiB/s", "read s", "read logical MiB/s",
	"read stored MiB/s: ranges / tm / manager", "ranges of link",
	"stored MiB", "frames", "runs", "write UploadPart + PutObject", "read data GETs (MiB)", "read metadata GETs (KiB)",
	"write RSS / bound MiB", "write input MiB", "read RSS / bound MiB",
}

// partitionsCells is a row of the table; limit is the link limit in bytes
// per second, 0 unshaped. "read" is the range read; what a report does not
// have (unshaped: of link; reports from before the transfermanager and
// manager reads: theirs) is "-".
func partitionsCells(r PartitionsRow, limit float64) []string {
	w, rd := r.Write, r.Read
	return []string{
		fmt.Sprint(r.Partitions), fmt.Sprint(r.Writers),
		fmt.Sprintf("%.2f", w.Seconds), mibps(w.LogicalBytesPerS), mibps(w.StoredBytesPerS),
		fmt.Sprintf("%.2f", rd.Seconds), mibps(rd.LogicalBytesPerS),
		optMiB(rd.StoredBytesPerS) + " / " + optMiB(r.TM.StoredBytesPerS) + " / " + optMiB(r.Manager.StoredBytesPerS),
		optFloat(ratio(rd.StoredBytesPerS, limit)),
		fmt.Sprintf("%.1f", float64(w.StoredBytes)/(1<<20)), fmt.Sprint(w.Frames), fmt.Sprint(w.Runs),
		fmt.Sprintf("%d + %d", w.Requests["UploadPart"], w.Requests["PutObject"]),
		fmt.Sprintf("%d (%.1f)", rd.DataGets, float64(rd.DataGetBytes)/(1<<20)),
		fmt.Sprintf("%d (%.1f)", rd.MetadataGets, float64(rd.MetadataBytes)/(1<<10)),
		fmt.Sprintf("%.0f / %.0f", float64(w.PeakRSSBytes)/(1<<20), float64(w.MemoryBound)/(1<<20)),
		fmt.Sprintf("%.0f", float64(w.InputBytes)/(1<<20)),
		fmt.Sprintf("%.0f / %.0f", float64(rd.PeakRSSBytes)/(1<<20), float64(rd.MemoryBound)/(1<<20)),
	}
}

func printPartitions(w io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(partitionsColumns, "\t")+"\t")
	for _, r := range rep.Partitions {
		fmt.Fprintln(tw, strings.Join(partitionsCells(r, float64(rep.Link.LimitBytesPerS)), "\t")+"\t")
	}
	tw.Flush()
}

// downloadsMeasured says whether the report has the transfermanager and
// manager reads (older reports do not).
func downloadsMeasured(rep *Report) bool {
	for _, r := range rep.Partitions {
		if r.TM.StoredBytes > 0 || r.Manager.StoredBytes > 0 {
			return true
		}
	}
	return false
}

func partitionsMarkdown(b *strings.Builder, rep *Report) {
	s := rep.Setup
	downloads := ""
	if downloadsMeasured(rep) {
		downloads = fmt.Sprintf("; the same data objects downloaded whole by transfermanager (tm) and manager, all at once, %d ranged GETs of read_range_bytes in flight per object", s.UploadConcurrency)
	}
	fmt.Fprintf(b, "%d rows (the same logical rows in every row of the table), fresh %d-row input batches split across the partitions, %d producer goroutine(s) per writer; read back by %d range readers at once, each opening the stage and reading P/%d contiguous partitions%s; chunk %s, concurrency %d, max_buffered_chunks %d, coalesce_budget %s, %s (stored/logical %.3f); %d CPUs; store: %s; %d round(s), medians.\n\n",
		s.Rows, s.WriteRows, s.Producers, s.Readers, s.Readers, downloads, sizeString(s.ChunkSize), s.UploadConcurrency, s.MaxBufferedChunks,
		sizeString(s.CoalesceBudget), s.Compression, s.StoredPerLogical, s.CPUs, s.Store, s.Rounds)
	b.WriteString("| " + strings.Join(partitionsColumns, " | ") + " |\n|")
	for range partitionsColumns {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, r := range rep.Partitions {
		b.WriteString("| " + strings.Join(partitionsCells(r, float64(rep.Link.LimitBytesPerS)), " | ") + " |\n")
	}
}

// plotPartitions draws throughput (write and range read, logical MiB/s)
// and stored bytes against the partition count, one line per writer
// count, the two panels one above the other.
func plotPartitions(rep *Report, path string) error {
	var writers []int
	for _, r := range rep.Partitions {
		if !slices.Contains(writers, r.Writers) {
			writers = append(writers, r.Writers)
		}
	}
	slices.Sort(writers)
	var ticks []plot.Tick
	for _, r := range rep.Partitions {
		if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == float64(r.Partitions) }) {
			ticks = append(ticks, plot.Tick{Value: float64(r.Partitions), Label: fmt.Sprint(r.Partitions)})
		}
	}
	axes := func(p *plot.Plot) {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Label.Text = "partitions"
		p.Y.Min = 0
		p.Legend.Top = true
	}
	speed, bytes := plot.New(), plot.New()
	speed.Title.Text = "durashuffle bench partitions"
	if rep.Link.LimitBytesPerS > 0 {
		speed.Title.Text += fmt.Sprintf(" (%.0f ms, %s/s x %d connections)", rep.Link.LatencyMS, sizeString(rep.Link.ConnBandwidthBytes), rep.Link.Connections)
	}
	speed.Y.Label.Text = "MiB/s logical"
	bytes.Y.Label.Text = "MiB stored"
	axes(speed)
	axes(bytes)
	palette := []color.Color{
		color.RGBA{R: 60, G: 110, B: 180, A: 255}, color.RGBA{R: 230, G: 140, B: 30, A: 255},
		color.RGBA{R: 40, G: 150, B: 70, A: 255}, color.RGBA{R: 130, G: 70, B: 160, A: 255},
	}
	for i, w := range writers {
		var wr, rd, st plotter.XYs
		for _, r := range rep.Partitions {
			if r.Writers != w {
				continue
			}
			x := float64(r.Partitions)
			wr = append(wr, plotter.XY{X: x, Y: r.Write.LogicalBytesPerS / (1 << 20)})
			rd = append(rd, plotter.XY{X: x, Y: r.Read.LogicalBytesPerS / (1 << 20)})
			st = append(st, plotter.XY{X: x, Y: float64(r.Write.StoredBytes) / (1 << 20)})
		}
		col := palette[i%len(palette)]
		for _, l := range []struct {
			p      *plot.Plot
			xy     plotter.XYs
			label  string
			dashed bool
		}{
			{speed, wr, writersName(w) + " write", false},
			{speed, rd, writersName(w) + " read", true},
			{bytes, st, writersName(w), false},
		} {
			line, pts, err := plotter.NewLinePoints(l.xy)
			if err != nil {
				return err
			}
			line.Color, pts.Color = col, col
			line.Width = vg.Points(2)
			if l.dashed {
				line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
			}
			l.p.Add(line, pts)
			l.p.Legend.Add(l.label, line, pts)
		}
	}
	if rep.Link.LimitBytesPerS > 0 && len(ticks) > 0 {
		lim := float64(rep.Link.LimitBytesPerS) / (1 << 20) / rep.Setup.StoredPerLogical
		line, err := plotter.NewLine(plotter.XYs{{X: ticks[0].Value, Y: lim}, {X: ticks[len(ticks)-1].Value, Y: lim}})
		if err != nil {
			return err
		}
		line.Color = color.RGBA{R: 200, G: 40, B: 40, A: 255}
		line.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
		speed.Add(line)
		speed.Legend.Add(fmt.Sprintf("link limit, logical %.0f", lim), line)
		speed.Y.Max = lim * 1.1
	}
	bytes.Legend.Left = true
	return saveColumn(path, 7*vg.Inch, 8*vg.Inch, speed, bytes)
}

// saveColumn draws top above bottom, aligned, on a w x h image, and
// saves it as a PNG at path.
func saveColumn(path string, w, h vg.Length, top, bottom *plot.Plot) error {
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6), PadY: vg.Points(12)}
	grid := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		grid[i][0].Draw(canvases[i][0])
	}
	return savePNG(img, path)
}

func savePNG(img *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
