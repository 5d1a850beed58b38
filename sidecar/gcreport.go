package sidecar

import (
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/gc"
)

// gcReport converts the gc tool's report to flightclient's wire type:
// the two have the same fields and JSON, so the gc action answers with
// the bytes `durashuffle gc --json` prints (TestGCReportWire). A nil
// list stays nil (null in JSON), as in the gc tool's.
func gcReport(r gc.Report) flightclient.GCReport {
	return flightclient.GCReport{
		DryRun: r.DryRun, Prefix: r.Prefix, Query: r.Query, Now: r.Now,
		Cutoff: r.Cutoff, ResultsCutoff: r.ResultsCutoff, CombinedCutoff: r.CombinedCutoff,
		Scanned: flightclient.GCScanned(r.Scanned),
		Uploads: convertAll(r.Uploads, func(u gc.Upload) flightclient.GCUpload { return flightclient.GCUpload(u) }),
		Orphans: convertAll(r.Orphans, func(o gc.Object) flightclient.GCObject { return flightclient.GCObject(o) }),
		Stages:  convertAll(r.Stages, func(s gc.Stage) flightclient.GCStage { return flightclient.GCStage(s) }),
		Skipped: r.Skipped,
		Totals:  flightclient.GCTotals(r.Totals),
	}
}

// convertAll maps f over in, keeping a nil slice nil.
func convertAll[In, Out any](in []In, f func(In) Out) []Out {
	if in == nil {
		return nil
	}
	out := make([]Out, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
