package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// stageHeader is what the CPU-by-stage tables say they show.
const stageHeader = "CPU by stage (median round): seconds, and in parentheses the share of the writer's CPU " +
	"(the child's CPU less input, the harness feeding rows), from a CPU profile of the child's clock scaled to its measured CPU; " +
	"- is a stage without samples, and stages without samples in any row are left out"

// stageColumns is the stages that some result has CPU in, in table order.
func stageColumns(rs []Result) []string {
	var cols []string
	for _, st := range Stages {
		for _, r := range rs {
			if r.CPUByStage[st] > 0 {
				cols = append(cols, st)
				break
			}
		}
	}
	return cols
}

// stageCells is a result's CPU by stage, one cell per column: "0.42
// (31%)", input without a share (it is not the writer's CPU), "-" for a
// stage without samples.
func stageCells(r Result, cols []string) []string {
	w := r.writerCPU()
	cells := make([]string, len(cols))
	for i, st := range cols {
		s := r.CPUByStage[st]
		if s == 0 {
			cells[i] = "-"
			continue
		}
		cells[i] = fmt.Sprintf("%.2f", s)
		if st != StageInput && w > 0 {
			cells[i] += fmt.Sprintf(" (%.0f%%)", 100*s/w)
		}
	}
	return cells
}

// stagedResults is the results whose CPU is divided by stage.
func stagedResults(rep *Report) []Result {
	var rs []Result
	for _, r := range rep.Results {
		if len(r.CPUByStage) > 0 {
			rs = append(rs, r)
		}
	}
	return rs
}

// printStages writes the CPU-by-stage table of the report's staged
// results, if any.
func printStages(w io.Writer, rep *Report) {
	rs := stagedResults(rep)
	if len(rs) == 0 {
		return
	}
	cols := stageColumns(rs)
	fmt.Fprintf(w, "  %s:\n", stageHeader)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tCPU s\twriter CPU s\tprofiled s\t%s\t\n", strings.Join(cols, "\t"))
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%s\t\n", r.Name, r.CPUSeconds, r.writerCPU(), r.CPUProfileSeconds, strings.Join(stageCells(r, cols), "\t"))
	}
	tw.Flush()
}

// stagesMarkdown writes the CPU-by-stage table of the report's staged
// results, if any, as Markdown.
func stagesMarkdown(b *strings.Builder, rep *Report) {
	rs := stagedResults(rep)
	if len(rs) == 0 {
		return
	}
	cols := stageColumns(rs)
	fmt.Fprintf(b, "\n%s.\n\n", stageHeader)
	fmt.Fprintf(b, "| contender | CPU s | writer CPU s | profiled s | %s |\n|---|---:|---:|---:|%s\n",
		strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
	for _, r := range rs {
		fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f | %s |\n", r.Name, r.CPUSeconds, r.writerCPU(), r.CPUProfileSeconds, strings.Join(stageCells(r, cols), " | "))
	}
}
