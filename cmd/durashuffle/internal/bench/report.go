package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// mibps formats bytes per second as MiB/s.
func mibps(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }

// PrintText writes the report as a readable table.
func PrintText(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "durashuffle bench %s", rep.Scenario)
	switch {
	case rep.Link.LimitBytesPerS > 0:
		fmt.Fprintf(w, ": link %.0f ms, %s/s per connection x %d connections = %s MiB/s limit",
			rep.Link.LatencyMS, sizeString(rep.Link.ConnBandwidthBytes), rep.Link.Connections, mibps(float64(rep.Link.LimitBytesPerS)))
	case rep.Link.ConnBandwidthBytes > 0:
		fmt.Fprintf(w, ": link %.0f ms, %s/s per connection; each cell's limit is its concurrency x that",
			rep.Link.LatencyMS, sizeString(rep.Link.ConnBandwidthBytes))
	}
	fmt.Fprintln(w)
	s := rep.Setup
	if rep.Scenario == ScenarioFastpath {
		fmt.Fprint(w, "  "+fastpathSetup(rep))
		fmt.Fprint(w, fastpathTable(rep))
		printTargets(w, rep)
		return
	}
	if rep.Scenario == ScenarioFan {
		printFan(w, rep)
		printTargets(w, rep)
		return
	}
	if rep.Scenario == ScenarioPartitions {
		downloads := ""
		if downloadsMeasured(rep) {
			downloads = ", transfermanager (tm) and manager downloading the data objects whole"
		}
		fmt.Fprintf(w, "  %d rows, %d-row input batches (%s) split across the partitions, %d producers per writer, %d range readers%s; %s chunks, concurrency %d, %s; %d rounds (medians); store: %s\n",
			s.Rows, s.WriteRows, s.Input, s.Producers, s.Readers, downloads, sizeString(s.ChunkSize), s.UploadConcurrency, s.Compression, s.Rounds, s.Store)
		printPartitions(w, rep)
		printTargets(w, rep)
		return
	}
	fmt.Fprintf(w, "  %d rows, %d partitions, %d-row writes (%s input), %d producers, %d worker(s); %s chunks, concurrency %d, %s; %d rounds (medians); store: %s\n",
		s.Rows, s.Partitions, s.WriteRows, s.Input, s.Producers, s.Workers, sizeString(s.ChunkSize), s.UploadConcurrency, s.Compression, s.Rounds, s.Store)
	if rep.Scenario == ScenarioSweep {
		fmt.Fprintln(w, "  (chunk size and concurrency per cell as named; \"of link\" is against each cell's own limit)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tseconds\tstored MiB/s\tlogical MiB/s\tof link\tfirst data s\tMiB/s sending\tpeak RSS MiB\tstored MiB\tCPU s/GiB stored\tCPU s/GiB logical\tPUTs/GiB stored\trequests\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t\n", r.Name, r.Seconds, mibps(r.StoredBytesPerS), mibps(r.LogicalBytesPerS),
			optFloat(r.LinkFraction), optFloat(r.FirstDataSeconds), optMiB(r.DataBytesPerS), float64(r.PeakRSSBytes)/(1<<20), float64(r.StoredBytes)/(1<<20),
			optFloat(cpuPerGiB(r.CPUSeconds, r.StoredBytes)), optFloat(cpuPerGiB(r.CPUSeconds, r.LogicalBytes)), optFloat(r.PutPerGiB), formatOps(r.Requests))
	}
	tw.Flush()
	printTimeline(w, rep)
	printStages(w, rep)
	for _, r := range rep.Results {
		if r.Name == DurashuffleAuto && len(r.Codecs) > 0 {
			fmt.Fprintf(w, "  %s frames by codec: %s\n", r.Name, codecMix(r.Codecs))
		}
	}
	for _, r := range rep.Results {
		if r.GetCeiling > 0 {
			fmt.Fprintf(w, "  %s: %d ranged GETs of %.0f KiB on average; one connection carries at most %.3f of its bandwidth with GETs that size (size / (size + round trip x bandwidth))\n",
				r.Name, r.RangedGets, r.MeanGetBytes/1024, r.GetCeiling)
		}
	}
	printTargets(w, rep)
}

func printTargets(w io.Writer, rep *Report) {
	for _, t := range rep.Targets {
		mark := "ok  "
		if !t.OK {
			mark = "MISS"
		}
		fmt.Fprintf(w, "  %s %s: %.3f (target %s)\n", mark, t.Name, t.Got, t.Want)
	}
	if rep.Recommendation != "" {
		fmt.Fprintf(w, "  recommended: %s\n", rep.Recommendation)
	}
}

// formatOps prints per-operation counts sorted by operation.
func formatOps(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", shortOp(k), m[k])
	}
	return b.String()
}

func shortOp(op string) string {
	switch op {
	case "CreateMultipartUpload":
		return "Create"
	case "CompleteMultipartUpload":
		return "Complete"
	case "AbortMultipartUpload":
		return "Abort"
	}
	return op
}

func optFloat(f float64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", f)
}

func optMiB(b float64) string {
	if b == 0 {
		return "-"
	}
	return mibps(b)
}

// cpuPerGiB is CPU seconds per GiB of bytes (0, shown as "-", when either
// is unknown): the cost of encoding, checksums and TLS per byte moved.
func cpuPerGiB(cpu float64, bytes int64) float64 {
	if cpu <= 0 || bytes <= 0 {
		return 0
	}
	return round3(cpu / (float64(bytes) / (1 << 30)))
}

// codecMix renders frames per codec: "lz4 120 (40%), zstd 180 (60%)".
func codecMix(codecs map[string]int) string {
	total := 0
	for _, n := range codecs {
		total += n
	}
	names := slices.Sorted(maps.Keys(codecs))
	parts := make([]string, len(names))
	for i, c := range names {
		parts[i] = fmt.Sprintf("%s %d (%.0f%%)", c, codecs[c], 100*float64(codecs[c])/float64(max(total, 1)))
	}
	return strings.Join(parts, ", ")
}
