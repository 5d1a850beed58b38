//go:build bench

package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/durashuffle/durashuffle/cmd/durashuffle/internal/bench"
)

// benchBars draws bench's live progress while a scenario runs: a bar over
// the scenario's runs (which round and contender, an ETA from the runs
// done) and one for the running child, from the samples the child reports
// (see bench.Watcher): bytes encoded, uploaded or read, requests in
// flight, buffers, throughput. Each scenario gets bars of its own, done
// before its report is printed, so the report never lands between
// redraws. Like progress, it exists only when stderr is a terminal and
// --quiet is off; newBenchBars returns nil otherwise.
//
// Lock order: the bars' decorators and meters take mu, and mpb calls them
// on its own goroutines, so nothing holding mu calls into mpb or p.
type benchBars struct {
	a   *app
	log *barLog

	mu       sync.Mutex
	p        *progress // this scenario's bars; nil between scenarios
	scenario string
	start    time.Time
	finished bool
	runs     int           // of the scenario, once the first round says
	runsDone int           // rounds' runs finished
	runTime  time.Duration // wall time of the runs finished
	child    *childRun     // nil between children
	// What earlier children took, for totals and the ETA: by contender,
	// and the bytes moved by data set (rows), as contenders move the same
	// stored bytes for the same rows.
	took  map[string]time.Duration
	moved map[string]int64
	rows  map[int64]int64
}

// childRun is the running child and its latest sample.
type childRun struct {
	job    *bench.Job
	label  string
	start  time.Time
	expect int64 // bytes it will move, from an earlier child; 0 unknown
	s      bench.Sample
	bar    *mpb.Bar
}

func (a *app) newBenchBars() *benchBars {
	if a.quiet || !isTTY(a.stderr) {
		return nil
	}
	return &benchBars{a: a, log: &barLog{w: a.stderr},
		took: map[string]time.Duration{}, moved: map[string]int64{}, rows: map[int64]int64{}}
}

// barLog is bench's log: lines go above the bars while a scenario draws
// them, straight to stderr between scenarios.
type barLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *barLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *barLog) to(w io.Writer) {
	l.mu.Lock()
	l.w = w
	l.mu.Unlock()
}

// begin draws the bars of a scenario.
func (b *benchBars) begin(scenario string) {
	if b == nil {
		return
	}
	p := b.a.startProgress()
	if p == nil {
		return
	}
	b.mu.Lock()
	b.p, b.scenario, b.start, b.finished = p, scenario, time.Now(), false
	b.runs, b.runsDone, b.runTime, b.child = 0, 0, 0, nil
	b.mu.Unlock()
	b.log.to(p.p)
	bar := p.p.New(0, mpb.BarStyle(),
		mpb.PrependDecorators(column(func() string { return scenario }), column(b.runText)),
		mpb.AppendDecorators(text(b.etaText)))
	p.track(bar, b.runsCur, b.runsTotal)
}

// end completes the scenario's bars (err nil) or abandons them, and stops
// drawing: the log goes to stderr again.
func (b *benchBars) end(err error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	p := b.p
	b.p, b.finished = nil, err == nil
	b.mu.Unlock()
	if p == nil {
		return
	}
	b.log.to(b.a.stderr)
	if err == nil {
		p.done()
	} else {
		p.close()
	}
}

// Started implements bench.Watcher: a bar for the child.
func (b *benchBars) Started(j *bench.Job) {
	b.mu.Lock()
	p := b.p
	c := &childRun{job: j, label: "prepare", start: time.Now()}
	if j.Round != nil {
		c.label = j.Round.Name
		b.runs = j.Round.Runs
		c.expect = b.moved[c.label]
	}
	if c.expect == 0 {
		c.expect = b.rows[j.Data.Rows]
	}
	b.child = c
	b.mu.Unlock()
	if p == nil {
		return
	}
	style := mpb.BarFillerBuilder(mpb.BarStyle())
	if c.expect == 0 {
		style = mpb.SpinnerStyle()
	}
	c.bar = p.p.New(0, style,
		mpb.PrependDecorators(
			column(func() string { return "  " + c.label }),
			column(func() string { return b.movedText(c) })),
		mpb.AppendDecorators(text(func() string { return b.rateText(c) })))
	if c.expect > 0 {
		c.bar.SetTotal(c.expect, false)
	}
	p.track(c.bar, func() int64 { return b.childMoved(c) }, func() int64 { return max(b.childTotal(c), b.childMoved(c)) })
}

// Progress implements bench.Watcher.
func (b *benchBars) Progress(j *bench.Job, s bench.Sample) {
	b.mu.Lock()
	if c := b.child; c != nil && c.job == j {
		c.s = s
	}
	b.mu.Unlock()
}

// Finished implements bench.Watcher: the child's bar goes, and what it
// took is kept for the next children's totals and the ETA.
func (b *benchBars) Finished(j *bench.Job, r *bench.Result) {
	b.mu.Lock()
	p, c := b.p, b.child
	b.child = nil
	if c != nil && c.job == j && r != nil {
		took, n := time.Since(c.start), moved(j, c.s)
		if j.Round != nil {
			b.runsDone++
			b.runTime += took
			b.took[c.label], b.moved[c.label] = took, n
		}
		b.rows[j.Data.Rows] = n
	}
	b.mu.Unlock()
	if p != nil && c != nil && c.bar != nil {
		p.drop(c.bar)
	}
}

// column is a decorator as wide as the widest of its column over the
// scenario's bars, so that the bars line up.
func column(f func() string) decor.Decorator {
	return decor.Any(func(decor.Statistics) string { return f() + " " }, decor.WC{C: decor.DindentRight | decor.DSyncWidth})
}

// moved is what a child has moved, by what it does: bytes read, bytes
// encoded (the null store keeps nothing, encode-files writes local
// files), or bytes uploaded.
func moved(j *bench.Job, s bench.Sample) int64 {
	switch {
	case j.Kind == "read":
		return s.Received
	case j.NullStore || j.Kind == "encode-files":
		return s.Encoded
	}
	return s.Sent
}

func movedVerb(j *bench.Job) string {
	switch {
	case j.Kind == "read":
		return "read"
	case j.NullStore || j.Kind == "encode-files":
		return "encoded"
	}
	return "uploaded"
}

func (b *benchBars) childMoved(c *childRun) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return moved(c.job, c.s)
}

func (b *benchBars) childTotal(c *childRun) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.s.Total > 0 {
		return c.s.Total
	}
	return c.expect
}

// movedText: "12.0 MiB / 32.3 MiB uploaded", or without the total when
// it is not known.
func (b *benchBars) movedText(c *childRun) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, total := moved(c.job, c.s), c.expect
	if c.s.Total > 0 {
		total = c.s.Total
	}
	if total > 0 {
		return fmt.Sprintf("%s / %s %s", mib(n), mib(max(total, n)), movedVerb(c.job))
	}
	return mib(n) + " " + movedVerb(c.job)
}

// rateText: percent (when the total is known), throughput since data
// began to move, what was encoded when it is not the figure on the left,
// requests in flight and the pool's buffers.
func (b *benchBars) rateText(c *childRun) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	j, s := c.job, c.s
	n := moved(j, s)
	var f []string
	if total := max(s.Total, c.expect); total > 0 {
		f = append(f, percent(n, total))
	}
	if s.Seconds > 0 {
		f = append(f, fmt.Sprintf("%.1f MiB/s", float64(n)/(1<<20)/s.Seconds))
	} else {
		f = append(f, "- MiB/s")
	}
	if s.Encoded > 0 && movedVerb(j) != "encoded" {
		f = append(f, mib(s.Encoded)+" encoded")
	}
	switch {
	case j.Kind == "read":
		f = append(f, fmt.Sprintf("GETs in flight %d", s.InFlight))
	case j.Kind == "write" && !j.NullStore:
		f = append(f, fmt.Sprintf("parts in flight %d", s.InFlight))
	}
	if s.Buffers > 0 || (strings.HasPrefix(j.Name, bench.Durashuffle) && j.Kind == "write") {
		f = append(f, fmt.Sprintf("buffers %d/%d", s.Buffers, j.Config.BufferedChunks()))
	}
	return strings.Join(f, "  ")
}

// runText: "round 2/3 transfermanager, run 5 of 9", "preparing (...)"
// while the scenario sets up, and what was run once it is done.
func (b *benchBars) runText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.child
	switch {
	case b.finished:
		return fmt.Sprintf("%d runs done", b.runsDone)
	case c != nil && c.job.Round != nil:
		r := c.job.Round
		return fmt.Sprintf("round %d/%d %s, run %d of %d", r.Round, r.Rounds, r.Name, r.Run, r.Runs)
	case c != nil:
		return fmt.Sprintf("preparing (%s %s)", c.job.Kind, c.job.Name)
	case b.runs > 0:
		return fmt.Sprintf("%d of %d runs done", b.runsDone, b.runs)
	}
	return "preparing"
}

// runsCur and runsTotal draw the scenario bar in thousandths of a run:
// the runs done and the part of the running one moved so far.
func (b *benchBars) runsCur() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := int64(b.runsDone) * 1000
	if c := b.child; c != nil && c.job.Round != nil {
		if total := max(c.s.Total, c.expect); total > 0 {
			n += min(1000, 1000*moved(c.job, c.s)/total)
		}
	}
	return n
}

func (b *benchBars) runsTotal() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(1, int64(b.runs)*1000)
}

// etaText: time since the scenario began and, once a run has finished,
// an estimate of the rest: what is left of the running child (by what
// that contender took before, else the mean run) plus the mean run for
// every run not yet started. Preparation is not counted.
func (b *benchBars) etaText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	el := time.Since(b.start).Round(time.Second)
	if b.finished {
		return "took " + el.String()
	}
	if b.runsDone == 0 || b.runs == 0 {
		return fmt.Sprintf("elapsed %s  ETA --", el)
	}
	mean := b.runTime / time.Duration(b.runsDone)
	left := b.runs - b.runsDone
	var eta time.Duration
	if c := b.child; c != nil && c.job.Round != nil {
		est, ok := b.took[c.label]
		if !ok {
			est = mean
		}
		eta += max(0, est-time.Since(c.start))
		left--
	}
	eta += time.Duration(left) * mean
	return fmt.Sprintf("elapsed %s  ETA %s", el, eta.Round(time.Second))
}
