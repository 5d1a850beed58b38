package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// timelineHeader introduces the write's timeline: where the time after
// the input goes.
const timelineHeader = "Timeline (seconds from the start of the run, the median round's): input end (the last writer calls Commit), " +
	"first data request's start, last one's start and last one's end; data requests in flight on average from the first to the last; " +
	"the stored bytes over the upload phase (first data byte to last) and over the time after the input, each against the link limit"

// timelineResults are the results with an input phase timed over the
// link.
func timelineResults(rep *Report) []Result {
	if rep.Scenario != ScenarioWrite || rep.Link.LimitBytesPerS == 0 {
		return nil
	}
	var out []Result
	for _, r := range rep.Results {
		if r.InputSeconds > 0 && r.FirstDataSeconds > 0 && r.Name != DurashuffleEncodeOnly {
			out = append(out, r)
		}
	}
	return out
}

func timelineCells(r Result) []string {
	return []string{r.Name, fmt.Sprintf("%.2f", r.InputSeconds), fmt.Sprintf("%.2f", r.FirstDataSeconds),
		fmt.Sprintf("%.2f", r.LastDataStartSeconds), fmt.Sprintf("%.2f", r.LastDataSeconds), fmt.Sprintf("%.2f", r.Seconds),
		optFloat(r.DataInFlight), optFloat(r.UploadLinkFraction), optFloat(r.AfterInputLinkFraction)}
}

var timelineColumns = []string{"contender", "input end s", "first data s", "last data start s", "last data end s", "seconds",
	"in flight", "upload phase / link", "after input / link"}

// printTimeline writes the timeline of the report's writes, if any.
func printTimeline(w io.Writer, rep *Report) {
	rs := timelineResults(rep)
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "  %s:\n", timelineHeader)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(timelineColumns, "\t")+"\t")
	for _, r := range rs {
		fmt.Fprintln(tw, strings.Join(timelineCells(r), "\t")+"\t")
	}
	tw.Flush()
}

// timelineMarkdown writes the timeline of the report's writes, if any, as
// Markdown.
func timelineMarkdown(b *strings.Builder, rep *Report) {
	rs := timelineResults(rep)
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s.\n\n", timelineHeader)
	fmt.Fprintf(b, "| %s |\n|---|%s\n", strings.Join(timelineColumns, " | "), strings.Repeat("---:|", len(timelineColumns)-1))
	for _, r := range rs {
		fmt.Fprintf(b, "| %s |\n", strings.Join(timelineCells(r), " | "))
	}
}
