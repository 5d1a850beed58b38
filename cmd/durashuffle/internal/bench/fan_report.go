package bench

import (
	"fmt"
	"image/color"
	"io"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// fanColumns are the columns of bench fan's table, as text and Markdown
// print it.
var fanColumns = []string{
	"writers x readers", "output per writer", "contender", "write s", "read s",
	"PUT-class requests (PUT / Create / Part / Complete)", "GETs", "GETs per reader", "mean GET KiB",
	"stored MiB", "objects", "write RSS MiB", "local disk peak MiB",
}

// fanCells is a row of the table; budget is the coalesce_budget.
func fanCells(r FanRow, budget int64) []string {
	head := []string{fmt.Sprintf("%d x %d", r.Writers, r.Readers), fmt.Sprintf("%dx (%s)", r.Multiple, sizeString(int64(r.Multiple)*budget)), r.Contender}
	if r.NotRun != "" {
		cells := append(head, "not run: "+r.NotRun)
		for len(cells) < len(fanColumns) {
			cells = append(cells, "-")
		}
		return cells
	}
	w, rd := r.Write, r.Read
	q := w.Requests
	return append(head,
		fmt.Sprintf("%.2f", w.Seconds), fmt.Sprintf("%.2f", rd.Seconds),
		fmt.Sprintf("%d (%d / %d / %d / %d)", putRequests(w), q["PutObject"], q["CreateMultipartUpload"], q["UploadPart"], q["CompleteMultipartUpload"]),
		fmt.Sprint(getRequests(rd)), fmt.Sprintf("%.1f", float64(getRequests(rd))/float64(max(1, r.Readers))),
		fmt.Sprintf("%.1f", meanGetBytes(rd)/1024),
		fmt.Sprintf("%.1f", float64(w.StoredBytes)/(1<<20)), fmt.Sprint(w.Objects),
		fmt.Sprintf("%.0f", float64(w.PeakRSSBytes)/(1<<20)), fmt.Sprintf("%.1f", float64(w.LocalDiskBytes)/(1<<20)),
	)
}

// fanSetup is what bench fan measured, in one paragraph.
func fanSetup(rep *Report) string {
	s := rep.Setup
	parts := 0
	if len(rep.Fan) > 0 {
		parts = rep.Fan[0].Partitions
	}
	return fmt.Sprintf("Each of W writers writes its multiple of coalesce_budget (%s) in logical bytes, fresh %d-row batches split across %d partitions from one producer each, all W in one process; then R readers at once, in one process, each read a contiguous range of P/R partitions from every writer, read_ahead (%d) GETs in flight each, every batch decoded and counted. "+
		"durashuffle: spill on (durashuffle's spill_dir in the run's local directory, its size sampled every 10 ms); spill-off: spill off, a sorted run uploaded each time the budget fills; both read by range readers (ReadPartitions). "+
		"druid: every writer sorts its rows by partition through local run files with the same memory (coalesce_budget), then uploads one object per partition (an LZ4 Arrow IPC stream; PUT, or multipart past the part size) on durashuffle's S3 store, with %d requests in flight; one GET per object read. "+
		"map-file: the same sort, the runs merged into one partition-sorted IPC file per writer (Spark's sort shuffle, its index kept on local disk as Spark's .index file, not fetched by the readers) uploaded with the AWS transfermanager; readers make ranged GETs of at most read_range_bytes (%s) of their range of each file. "+
		"Local disk: the most a writer process had on disk at once. Chunk %s, concurrency %d, max_buffered_chunks %d, %s; %d CPUs; store: %s; %d round(s), medians. Requests are counted by the clients, every attempt.\n",
		sizeString(s.CoalesceBudget), s.WriteRows, parts, s.ReadAhead, s.UploadConcurrency, sizeString(s.ReadRangeBytes),
		sizeString(s.ChunkSize), s.UploadConcurrency, s.MaxBufferedChunks, s.Compression, s.CPUs, s.Store, s.Rounds)
}

func printFan(w io.Writer, rep *Report) {
	fmt.Fprint(w, "  "+fanSetup(rep))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(fanColumns, "\t")+"\t")
	for _, r := range rep.Fan {
		fmt.Fprintln(tw, strings.Join(fanCells(r, rep.Setup.CoalesceBudget), "\t")+"\t")
	}
	tw.Flush()
}

func fanMarkdown(b *strings.Builder, rep *Report) {
	b.WriteString(fanSetup(rep) + "\n")
	b.WriteString("| " + strings.Join(fanColumns, " | ") + " |\n|")
	for i := range fanColumns {
		if i < 3 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range rep.Fan {
		b.WriteString("| " + strings.Join(fanCells(r, rep.Setup.CoalesceBudget), " | ") + " |\n")
	}
}

// plotFan draws write and read seconds per cell, one line per
// contender, the two panels one above the other.
func plotFan(rep *Report, path string) error {
	var cells []string
	for _, r := range rep.Fan {
		if n := r.cellName(); len(cells) == 0 || cells[len(cells)-1] != n {
			cells = append(cells, n)
		}
	}
	var ticks []plot.Tick
	for i, c := range cells {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: c})
	}
	write, read := plot.New(), plot.New()
	write.Title.Text = "durashuffle bench fan"
	if rep.Link.LimitBytesPerS > 0 {
		write.Title.Text += fmt.Sprintf(" (%.0f ms, %s/s x %d connections)", rep.Link.LatencyMS, sizeString(rep.Link.ConnBandwidthBytes), rep.Link.Connections)
	}
	write.Y.Label.Text, read.Y.Label.Text = "write s", "read s"
	read.X.Label.Text = "writers x readers, output per writer / coalesce_budget"
	for _, p := range []*plot.Plot{write, read} {
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
	}
	palette := []color.Color{
		color.RGBA{R: 60, G: 110, B: 180, A: 255}, color.RGBA{R: 230, G: 140, B: 30, A: 255},
		color.RGBA{R: 40, G: 150, B: 70, A: 255}, color.RGBA{R: 130, G: 70, B: 160, A: 255},
	}
	for k, name := range fanContenders {
		var wr, rd plotter.XYs
		for _, r := range rep.Fan {
			if r.Contender != name || r.NotRun != "" {
				continue
			}
			for i, c := range cells {
				if c == r.cellName() {
					wr = append(wr, plotter.XY{X: float64(i), Y: r.Write.Seconds})
					rd = append(rd, plotter.XY{X: float64(i), Y: r.Read.Seconds})
				}
			}
		}
		if len(wr) == 0 {
			continue
		}
		for _, l := range []struct {
			p  *plot.Plot
			xy plotter.XYs
		}{{write, wr}, {read, rd}} {
			line, pts, err := plotter.NewLinePoints(l.xy)
			if err != nil {
				return err
			}
			line.Color, pts.Color = palette[k%len(palette)], palette[k%len(palette)]
			line.Width = vg.Points(2)
			l.p.Add(line, pts)
			l.p.Legend.Add(name, line, pts)
		}
	}
	return saveColumn(path, 8*vg.Inch, 8*vg.Inch, write, read)
}
