package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

// runSorter is the map side of a sort shuffle, which the druid and
// map-file contenders share (Spark's ExternalSorter, Druid's
// SuperSorter): a writer's rows are copied into one accumulator per
// partition until they hold coalesce_budget bytes, the memory
// durashuffle's writer has for the same rows; then every partition's
// rows go to a local run file in partition order, as one LZ4-compressed
// Arrow IPC record batch per partition, and the accumulators start
// empty. Safe for concurrent use: Writes take one lock, and a spill
// holds it, as a Spark task's spill holds its thread.
type runSorter struct {
	mu      sync.Mutex
	dir     string
	name    string // the run files' name prefix
	budget  int64
	accs    []*frame.Accumulator
	held    int64 // the accumulators' bytes
	rows    int64
	runs    []sortedRun
	disk    *diskMeter
	files   []*os.File // the runs, open for reading once closed
	removed bool
}

// sortedRun is one run file: an Arrow IPC stream whose record batches
// are in partition order, at most one per partition. seg[p] is
// partition p's batch as the byte range [seg[p][0], seg[p][1]) of the
// file, empty when the run has no row of p.
type sortedRun struct {
	path string
	seg  [][2]int64
	size int64
}

func newRunSorter(dir, name string, partitions int, budget int64, disk *diskMeter) (*runSorter, error) {
	s := &runSorter{dir: dir, name: name, budget: budget, accs: make([]*frame.Accumulator, partitions), disk: disk}
	for p := range s.accs {
		a, ok := frame.NewAccumulator(demo.Schema())
		if !ok {
			return nil, fmt.Errorf("sorter: the demo schema has a column type the accumulator does not copy")
		}
		s.accs[p] = a
	}
	return s, nil
}

// Write copies rec's rows into partition p's accumulator, and spills
// every partition when the accumulators reach the budget.
func (s *runSorter) Write(p int, rec arrow.RecordBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.accs[p]
	before := a.Held()
	if err := a.Append(rec); err != nil {
		return fmt.Errorf("partition %d: %w", p, err)
	}
	s.held += a.Held() - before
	s.rows += rec.NumRows()
	if s.held >= s.budget {
		return s.spill()
	}
	return nil
}

// Close spills what the accumulators hold (a writer whose rows never
// filled the budget has one run) and opens the runs for reading.
func (s *runSorter) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held > 0 || len(s.runs) == 0 {
		if err := s.spill(); err != nil {
			return err
		}
	}
	for _, r := range s.runs {
		f, err := os.Open(r.path)
		if err != nil {
			return err
		}
		s.files = append(s.files, f)
	}
	return nil
}

// spill writes every partition's accumulated rows to a new run file.
func (s *runSorter) spill() error {
	path := filepath.Join(s.dir, fmt.Sprintf("%s-run-%03d.arrows", s.name, len(s.runs)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	run := sortedRun{path: path, seg: make([][2]int64, len(s.accs))}
	bw := bufio.NewWriterSize(f, 1<<20)
	pw := &indexedStream{w: bw, disk: s.disk}
	iw := ipc.NewWriterWithPayloadWriter(pw, ipc.WithSchema(demo.Schema()), ipc.WithLZ4(), ipc.WithAllocator(memory.DefaultAllocator))
	for p, a := range s.accs {
		rec := a.Finish()
		if rec == nil {
			run.seg[p] = [2]int64{pw.pos, pw.pos}
			continue
		}
		err := iw.Write(rec)
		rec.Release()
		if err != nil {
			f.Close()
			return fmt.Errorf("spill partition %d to %s: %w", p, path, err)
		}
		run.seg[p] = [2]int64{pw.last, pw.pos}
	}
	s.held = 0
	err = iw.Close()
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("spill to %s: %w", path, err)
	}
	run.size = pw.pos
	s.runs = append(s.runs, run)
	return nil
}

// partitionSize is the bytes of partition p's batches over every run.
func (s *runSorter) partitionSize(p int) int64 {
	var n int64
	for _, r := range s.runs {
		n += r.seg[p][1] - r.seg[p][0]
	}
	return n
}

// partition is partition p's batches, run after run (Spark's fast
// merge: the compressed batches are concatenated, not re-encoded).
func (s *runSorter) partition(p int) io.Reader {
	rs := make([]io.Reader, 0, len(s.runs))
	for i, r := range s.runs {
		if lo, hi := r.seg[p][0], r.seg[p][1]; hi > lo {
			rs = append(rs, io.NewSectionReader(s.files[i], lo, hi-lo))
		}
	}
	return io.MultiReader(rs...)
}

// merge writes the runs as one partition-sorted IPC stream at path (a
// single run is renamed), deletes them, and returns its index:
// partition p's batches are the bytes [off[p], off[p+1]). The map file
// is then the sorter's one run, which remove deletes.
func (s *runSorter) merge(path string) ([]int64, error) {
	parts := len(s.accs)
	off := make([]int64, parts+1)
	if len(s.runs) == 1 {
		r := s.runs[0]
		// Backwards, so that an empty partition starts where the next
		// one does; the last batch ends where the end-of-stream marker
		// starts.
		off[parts] = r.size - int64(len(eos))
		for p := parts - 1; p >= 0; p-- {
			off[p] = off[p+1]
			if r.seg[p][1] > r.seg[p][0] {
				off[p] = r.seg[p][0]
			}
		}
		if err := os.Rename(r.path, path); err != nil {
			return nil, err
		}
		s.runs[0].path = path
		return off, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	cw := &countingWriter{w: bw, disk: s.disk}
	prefix := schemaPrefix()
	if _, err := cw.Write(prefix); err != nil {
		return nil, err
	}
	for p := range parts {
		off[p] = cw.n
		if _, err := io.Copy(cw, s.partition(p)); err != nil {
			return nil, fmt.Errorf("merge partition %d into %s: %w", p, path, err)
		}
	}
	off[parts] = cw.n
	if _, err := cw.Write(eos); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	// The runs are merged: the map file is the one run left, which
	// remove deletes with the others.
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.runs {
		s.files[i].Close()
		if err := os.Remove(r.path); err != nil {
			return nil, err
		}
		s.disk.add(-r.size)
	}
	s.runs, s.files = []sortedRun{{path: path, size: cw.n}}, nil
	return off, nil
}

// remove deletes the run files (what merge renamed included).
func (s *runSorter) remove() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return
	}
	s.removed = true
	for _, f := range s.files {
		f.Close()
	}
	for _, r := range s.runs {
		if os.Remove(r.path) == nil {
			s.disk.add(-r.size)
		}
	}
}

// indexedStream is an IPC stream's payload writer that knows where each
// message starts: last is the offset of the latest message, pos the
// bytes written.
type indexedStream struct {
	w         io.Writer
	disk      *diskMeter
	last, pos int64
}

func (s *indexedStream) Start() error { return nil }

func (s *indexedStream) WritePayload(p ipc.Payload) error {
	s.last = s.pos
	_, err := p.WritePayload(s)
	return err
}

func (s *indexedStream) Close() error {
	_, err := s.Write(eos)
	return err
}

func (s *indexedStream) Write(b []byte) (int, error) {
	n, err := s.w.Write(b)
	s.pos += int64(n)
	s.disk.add(int64(n))
	return n, err
}

// countingWriter counts what it writes, on local disk when disk is set.
type countingWriter struct {
	w    io.Writer
	n    int64
	disk *diskMeter
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	if c.disk != nil {
		c.disk.add(int64(n))
	}
	return n, err
}

// eos is the IPC stream's end-of-stream marker.
var eos = []byte{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0}

// schemaPrefix is the IPC stream's opening for the demo schema: what an
// LZ4 stream of it holds before its first record batch. A partition's
// batches read on their own are a stream once it is put before them and
// eos after.
var schemaPrefix = sync.OnceValue(func() []byte {
	var b bytes.Buffer
	w := ipc.NewWriter(&b, ipc.WithSchema(demo.Schema()), ipc.WithLZ4())
	if err := w.Close(); err != nil {
		panic(fmt.Sprintf("encode the demo schema: %v", err))
	}
	return bytes.Clone(b.Bytes()[:b.Len()-len(eos)])
})
