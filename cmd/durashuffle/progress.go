package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/reader"
)

// progress draws live bars on stderr while demo, write or read -o runs:
// what was encoded and uploaded, parts in flight, throughput, and an ETA
// where the total is known. A nil *progress does nothing, so commands call
// its methods unconditionally. startProgress returns nil unless stderr is
// a terminal and --quiet is off: a pipe, a file or --quiet gets the logs
// and nothing else.
//
// The numbers come from the upload pool's observer (chunks handed to the
// pool, bytes stored by finished parts), the pool's stats (parts in
// flight, effective concurrency, buffers held) and counters the commands
// bump as they feed rows in or take rows out. A ticker copies them into
// the bars; mpb redraws them in place. bench draws bars of its own on a
// progress (see benchBars).
type progress struct {
	a       *app
	p       *mpb.Progress
	saveLog *slog.Logger

	mu     sync.Mutex
	meters []*meter
	stop   chan struct{} // closed to stop the ticker
	ticked chan struct{} // closed when the ticker has returned
	closed bool

	// Writing, from the pool observer.
	chunkSize int64
	cut       atomic.Int64 // chunks handed to the pool
	short     atomic.Int64 // bytes by which finished parts fell short of chunkSize
	uploaded  atomic.Int64 // bytes stored by finished parts
	in        atomic.Int64 // input consumed: rows (demo) or bytes of the input file (write)
	inSize    int64        // size of the input file; -1 unknown

	// Reading.
	rows atomic.Int64 // rows delivered
}

// progressRefresh is how often the bars are redrawn.
const progressRefresh = 120 * time.Millisecond

// startProgress returns a progress on stderr, or nil when stderr is not a
// terminal or --quiet is set. While it runs, log lines are printed above
// the bars instead of through them.
func (a *app) startProgress() *progress {
	if a.quiet || !isTTY(a.stderr) {
		return nil
	}
	p := &progress{a: a, inSize: -1, stop: make(chan struct{}), ticked: make(chan struct{})}
	p.p = mpb.New(mpb.WithOutput(a.stderr), mpb.WithWidth(28), mpb.WithRefreshRate(progressRefresh))
	p.saveLog = a.log
	// Same level and format, but through the container: it prints each
	// line above the bars on its next refresh.
	stderr := a.stderr
	a.stderr = p.p
	if err := a.setupLogging(); err != nil {
		a.log = p.saveLog
	}
	a.stderr = stderr
	go p.tick()
	return p
}

// isTTY reports whether w is a terminal (not merely a character device
// such as /dev/null).
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// meter is one bar and where its numbers come from.
type meter struct {
	bar   *mpb.Bar
	cur   func() int64
	total func() int64 // nil: fixed (or unknown) total
}

func (p *progress) tick() {
	defer close(p.ticked)
	t := time.NewTicker(progressRefresh / 2)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.update()
		}
	}
}

// update copies the counters into the bars.
func (p *progress) update() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.meters {
		if m.total != nil {
			m.bar.SetTotal(m.total(), false)
		}
		m.bar.SetCurrent(m.cur())
	}
}

// add makes a bar of total units (0: unknown, drawn as a spinner). Bars
// never complete by themselves: the total of the input file or of the
// frames to read is an estimate of the work, and complete says when it is
// done.
func (p *progress) add(total int64, cur func() int64, dynTotal func() int64, name string, left, right decor.Decorator) {
	var style mpb.BarFillerBuilder = mpb.BarStyle()
	if total <= 0 && dynTotal == nil {
		style = mpb.SpinnerStyle()
	}
	bar := p.p.New(0, style,
		mpb.PrependDecorators(decor.Name(name, decor.WC{W: 7, C: decor.DindentRight}), left),
		mpb.AppendDecorators(right),
	)
	if total > 0 {
		bar.SetTotal(total, false)
	}
	p.track(bar, cur, dynTotal)
}

// track has the ticker copy cur, and total unless it is nil, into bar.
// cur and total are called with p.mu held: they must not wait for
// anything that calls p's methods.
func (p *progress) track(bar *mpb.Bar, cur, total func() int64) {
	p.mu.Lock()
	p.meters = append(p.meters, &meter{bar: bar, cur: cur, total: total})
	p.mu.Unlock()
}

// drop stops updating bar and removes it from the display.
func (p *progress) drop(bar *mpb.Bar) {
	p.mu.Lock()
	p.meters = slices.DeleteFunc(p.meters, func(m *meter) bool { return m.bar == bar })
	p.mu.Unlock()
	bar.Abort(true)
}

// observer returns the upload pool observer feeding the bars, or nil.
func (p *progress) observer(chunkSize int64) durashuffle.Observer {
	if p == nil {
		return nil
	}
	p.chunkSize = chunkSize
	return (*poolWatch)(p)
}

// poolWatch is the durashuffle.Observer side of a progress. Every chunk
// handed to the pool is chunkSize bytes except the last of each object, so
// encoded bytes are chunks x chunkSize less what finished parts fell short
// by: exact once every part is done, never behind before.
type poolWatch progress

func (w *poolWatch) Queued(delta int) {
	if delta > 0 {
		w.cut.Add(int64(delta))
	}
}
func (w *poolWatch) Buffered(int64)              {}
func (w *poolWatch) PartDone(_, _ time.Duration) {}
func (w *poolWatch) Uploaded(n int64) {
	w.uploaded.Add(n)
	if d := w.chunkSize - n; d > 0 {
		w.short.Add(d)
	}
}

func (p *progress) encoded() int64 {
	return max(p.cut.Load()*p.chunkSize-p.short.Load(), p.uploaded.Load())
}

// writingRows shows the demo's write phase: rows fed to the writers out
// of total, and the upload bars.
func (p *progress) writingRows(c *durashuffle.Client, total int64) {
	if p == nil {
		return
	}
	start := time.Now()
	p.add(total, p.in.Load, nil, "write",
		text(func() string { return fmt.Sprintf("%s / %s rows", count(p.in.Load()), count(total)) }),
		text(func() string {
			return fmt.Sprintf("%s  %s  %s encoded", percent(p.in.Load(), total), eta(start, p.in.Load(), total), mib(p.encoded()))
		}))
	p.uploading(c)
}

// writingInput shows write's phase: bytes of the input consumed (out of
// the file's size when it is a file), and the upload bars.
func (p *progress) writingInput(c *durashuffle.Client) {
	if p == nil {
		return
	}
	start, total := time.Now(), p.inSize
	if total < 0 {
		p.add(0, p.in.Load, nil, "input",
			text(func() string { return mib(p.in.Load()) + " read" }),
			text(func() string { return mib(p.encoded()) + " encoded" }))
	} else {
		p.add(total, p.in.Load, nil, "input",
			text(func() string { return fmt.Sprintf("%s / %s", mib(p.in.Load()), mib(total)) }),
			text(func() string {
				return fmt.Sprintf("%s  %s  %s encoded", percent(p.in.Load(), total), eta(start, p.in.Load(), total), mib(p.encoded()))
			}))
	}
	p.uploading(c)
}

// uploading adds the upload bar: bytes stored out of bytes encoded so far,
// throughput, parts in flight and buffers held.
func (p *progress) uploading(c *durashuffle.Client) {
	start := time.Now()
	p.add(0, p.uploaded.Load, p.encoded, "upload",
		text(func() string { return fmt.Sprintf("%s / %s", mib(p.uploaded.Load()), mib(p.encoded())) }),
		text(func() string {
			st := c.Stats()
			return fmt.Sprintf("%s  parts in flight %d/%d  buffers %d/%d",
				rate(p.uploaded.Load(), start), st.InFlight, st.Concurrency, st.Buffered, st.MaxBuffered)
		}))
}

// input counts the bytes read from r, the write command's input, against
// its size when it is a regular file. A file keeps its ReadAt and Seek
// (the Arrow IPC file format needs them).
func (p *progress) input(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	f, ok := r.(*os.File)
	if !ok {
		return &countReader{r: r, n: &p.in}
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		p.inSize = fi.Size()
	}
	return &countFile{File: f, n: &p.in}
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

type countFile struct {
	*os.File
	n *atomic.Int64
}

func (c *countFile) Read(b []byte) (int, error) {
	n, err := c.File.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.File.ReadAt(b, off)
	c.n.Add(int64(n))
	return n, err
}

// wrote counts rows the demo handed to its writers.
func (p *progress) wrote(rows int64) {
	if p != nil {
		p.in.Add(rows)
	}
}

// readingRows shows the demo's read phase: rows read back out of total,
// and the stored bytes they stand for.
func (p *progress) readingRows(c *durashuffle.Client, total, stored int64) {
	if p == nil {
		return
	}
	p.complete()
	start := time.Now()
	gets := c.Counter().Requests()["GetObject"]
	p.add(total, p.rows.Load, nil, "read",
		text(func() string { return fmt.Sprintf("%s / %s rows", count(p.rows.Load()), count(total)) }),
		text(func() string {
			n := p.rows.Load()
			done := int64(float64(stored) * float64(n) / float64(max(total, 1)))
			return fmt.Sprintf("%s  %s  %s  GETs %d", percent(n, total), eta(start, n, total), rate(done, start),
				c.Counter().Requests()["GetObject"]-gets)
		}))
}

// readRows counts rows the demo read back.
func (p *progress) readRows(n int64) {
	if p != nil {
		p.rows.Add(n)
	}
}

// reading shows read -o: the stored bytes of the frames delivered out of
// those the read will fetch, as the stream's plan lists them. It returns
// src, counting what passes through.
func (p *progress) reading(c *durashuffle.Client, src recordSource, plan []reader.Planned) recordSource {
	if p == nil {
		return src
	}
	shares := make([]share, len(plan))
	var total int64
	for i, f := range plan {
		shares[i] = share{f.Rows, f.Stored}
		total += f.Stored
	}
	rs := &readSource{recordSource: src, shares: shares, rows: &p.rows}
	start := time.Now()
	gets := c.Counter().Requests()["GetObject"]
	p.add(total, rs.stored.Load, nil, "read",
		text(func() string { return fmt.Sprintf("%s / %s stored", mib(rs.stored.Load()), mib(total)) }),
		text(func() string {
			n := rs.stored.Load()
			return fmt.Sprintf("%s  %s  %s  %s rows  GETs %d", percent(n, total), eta(start, n, total), rate(n, start),
				count(p.rows.Load()), c.Counter().Requests()["GetObject"]-gets)
		}))
	return rs
}

// share is one frame as a read delivers it: its rows (after the skip and
// take of a page) and its stored bytes.
type share struct{ rows, bytes int64 }

// readSource counts rows as they pass and turns them into stored bytes:
// whole frames delivered, plus the delivered fraction of the current one.
type readSource struct {
	recordSource
	shares []share
	rows   *atomic.Int64
	next   int   // first frame not completely delivered
	acc    int64 // rows of shares[next] delivered
	done   int64 // stored bytes of shares[:next]
	stored atomic.Int64
}

func (r *readSource) Next() bool {
	if !r.recordSource.Next() {
		return false
	}
	n := r.RecordBatch().NumRows()
	r.rows.Add(n)
	r.acc += n
	for r.next < len(r.shares) && r.acc >= r.shares[r.next].rows {
		r.acc -= r.shares[r.next].rows
		r.done += r.shares[r.next].bytes
		r.next++
	}
	cur := r.done
	if r.next < len(r.shares) && r.shares[r.next].rows > 0 {
		s := r.shares[r.next]
		cur += s.bytes * r.acc / s.rows
	}
	r.stored.Store(cur)
	return true
}

// complete marks the current bars done at their final values.
func (p *progress) complete() {
	if p == nil {
		return
	}
	p.update()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.meters {
		m.bar.SetTotal(-1, true)
	}
	p.meters = nil
}

// done completes the bars and stops drawing: call it before printing to
// stdout, so the summary does not land between redraws.
func (p *progress) done() {
	if p == nil {
		return
	}
	p.complete()
	p.close()
}

// close stops drawing, leaving any bar not completed as it is (aborted),
// and restores the logger. Idempotent; deferred by every command that
// starts a progress.
func (p *progress) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.stop)
	p.mu.Unlock()
	<-p.ticked
	p.mu.Lock()
	for _, m := range p.meters {
		m.bar.Abort(false)
	}
	p.meters = nil
	p.mu.Unlock()
	p.p.Wait()
	p.a.log = p.saveLog
}

func text(f func() string) decor.Decorator {
	return decor.Any(func(decor.Statistics) string { return f() })
}

// count formats a row count: 950, 12.3k, 1.25M.
func count(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return fmt.Sprint(n)
	}
}

func percent(n, total int64) string {
	if total <= 0 {
		return "  - %"
	}
	return fmt.Sprintf("%3d%%", min(100, n*100/total))
}

// eta extrapolates the average rate since start to the rest of total.
func eta(start time.Time, n, total int64) string {
	el := time.Since(start)
	if n <= 0 || el < time.Second/4 {
		return "ETA --"
	}
	left := time.Duration(float64(el) * float64(max(total-n, 0)) / float64(n)).Round(time.Second)
	return "ETA " + left.String()
}

// rate is the average throughput of n bytes since start.
func rate(n int64, start time.Time) string {
	s := time.Since(start).Seconds()
	if s <= 0 {
		return "- MiB/s"
	}
	return fmt.Sprintf("%.1f MiB/s", float64(n)/(1<<20)/s)
}
