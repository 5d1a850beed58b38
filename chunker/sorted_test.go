package chunker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/spill"
)

// writeScattered writes n rows in batches of 4 to partitions in a
// scattered order and returns the ids each partition should read back,
// in write order.
func writeScattered(t *testing.T, w *Writer, partitions, n int) map[int][]int64 {
	t.Helper()
	want := map[int][]int64{}
	for lo := 0; lo < n; lo += 4 {
		p := (lo * 7919 / 4) % partitions
		rec := rows(memory.DefaultAllocator, lo, 4)
		err := w.Write(p, rec)
		rec.Release()
		if err != nil {
			t.Fatalf("write of rows %d: %v", lo, err)
		}
		for i := lo; i < lo+4; i++ {
			want[p] = append(want[p], int64(i))
		}
	}
	return want
}

// writeUntilFailure writes n rows as writeScattered does until a Write
// fails, then closes w: it returns the failed Write's error, else
// Close's.
func writeUntilFailure(w *Writer, partitions, n int) error {
	var werr error
	for lo := 0; lo < n && werr == nil; lo += 4 {
		rec := rows(memory.DefaultAllocator, lo, 4)
		werr = w.Write((lo*7919/4)%partitions, rec)
		rec.Release()
	}
	_, err := w.Close()
	if werr != nil {
		return werr
	}
	return err
}

func openSpill(t *testing.T, limit int64) *spill.Dir {
	t.Helper()
	d, err := spill.Open(t.TempDir(), limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// newSorted opens a writer of o that spills to d, on a fresh sink of
// 100_000-byte chunks.
func newSorted(t *testing.T, o Options, d *spill.Dir) (*Writer, *memSink) {
	t.Helper()
	sink := newSink(t, 100_000, 4)
	o.Spill = d
	w, err := New(context.Background(), o, sink)
	if err != nil {
		t.Fatal(err)
	}
	return w, sink
}

// spillFiles lists the files in d's process directory (its lock aside).
func spillFiles(t *testing.T, d *spill.Dir) []string {
	t.Helper()
	ents, err := os.ReadDir(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() != "lock" {
			names = append(names, e.Name())
		}
	}
	return names
}

// ascendingRuns counts the runs of ascending partitions in res's frames.
func ascendingRuns(res Result) int {
	runs := 1
	for i := 1; i < len(res.Frames); i++ {
		if res.Frames[i].Partition < res.Frames[i-1].Partition {
			runs++
		}
	}
	return runs
}

func storedBytes(res Result) int64 {
	var n int64
	for _, o := range res.Objects {
		n += o.Size
	}
	return n
}

// TestSortedOneRun: a writer with a spill whose output is many times its
// budget flushes many runs, yet its object holds one partition-sorted
// run with every row in write order, its frames merged toward
// frame_target_bytes; the spill is empty after Close.
func TestSortedOneRun(t *testing.T) {
	const partitions = 300
	d := openSpill(t, 1<<30)
	o := opts(partitions)
	w, sink := newSorted(t, o, d)
	want := writeScattered(t, w, partitions, 45_000)
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs < 3 || res.spilled == 0 {
		t.Fatalf("%d runs, %d bytes spilled: the output should take several runs under a %d-byte budget", res.Runs, res.spilled, o.CoalesceBudget)
	}
	if runs := ascendingRuns(res); runs != 1 {
		t.Fatalf("the object holds %d runs of ascending partitions, want 1 (the writer flushed %d)", runs, res.Runs)
	}
	got := decodeAll(t, sink, res)
	for p := range partitions {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: %d rows back, want %d in write order", p, len(got[p]), len(want[p]))
		}
	}
	// Each partition holds ~150 rows (a few KiB), far under a frame:
	// its pieces from every run are merged into one frame.
	frames := map[int]int{}
	for _, f := range res.Frames {
		frames[f.Partition]++
	}
	for p, n := range frames {
		if n != 1 {
			t.Fatalf("partition %d: %d frames, want its pieces of %d runs merged into 1", p, n, res.Runs)
		}
	}
	if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
		t.Fatalf("after Close the spill holds %v (%d bytes counted)", files, d.Used())
	}
}

// TestSortedFitsNoDisk: output that fits the budget never touches the
// disk.
func TestSortedFitsNoDisk(t *testing.T) {
	d := openSpill(t, 1<<30)
	w, sink := newSorted(t, opts(16), d)
	want := writeScattered(t, w, 16, 2_000)
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.spilled != 0 || res.Runs != 1 {
		t.Fatalf("%d runs, %d bytes spilled, want 1 run and none", res.Runs, res.spilled)
	}
	got := decodeAll(t, sink, res)
	for p := range 16 {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: rows differ", p)
		}
	}
	ents, _ := os.ReadDir(d.Path())
	if len(ents) != 1 { // the lock
		t.Fatalf("the spill directory holds %d entries, want only its lock", len(ents))
	}
}

// TestSortedStoredBytesDoNotGrowWithRuns: the same input, written under
// a budget that takes one run and one that takes many, stores about the
// same bytes with a spill; without one, the many-run object is larger.
func TestSortedStoredBytesDoNotGrowWithRuns(t *testing.T) {
	const partitions = 64
	write := func(budget int64, sp *spill.Dir) Result {
		o := opts(partitions)
		o.CoalesceBudget = budget
		w, _ := newSorted(t, o, sp)
		writeScattered(t, w, partitions, 60_000)
		res, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	d := openSpill(t, 1<<30)
	one := write(64<<20, d)
	many := write(256<<10, d)
	off := write(256<<10, nil)
	if one.Runs != 1 || many.Runs < 8 {
		t.Fatalf("runs: %d and %d, want 1 and at least 8", one.Runs, many.Runs)
	}
	ratio := float64(storedBytes(many)) / float64(storedBytes(one))
	offRatio := float64(storedBytes(off)) / float64(storedBytes(one))
	t.Logf("stored: 1 run %d bytes; %d runs %d bytes with a spill (%.3fx), %d without (%.3fx)",
		storedBytes(one), many.Runs, storedBytes(many), ratio, storedBytes(off), offRatio)
	if ratio > 1.03 {
		t.Fatalf("%d runs with a spill store %.3fx the bytes of one run, want at most 1.03x", many.Runs, ratio)
	}
	if offRatio < ratio {
		t.Fatalf("without a spill %d runs store %.3fx, less than with one (%.3fx)", off.Runs, offRatio, ratio)
	}
	// The runs' small pieces are spilled uncompressed (as their rows'
	// buffers: about the logical bytes of every run but the last, which
	// stays in memory, where compressed they would be 0.89 of that) and
	// compressed once, merged: no piece reaches the object uncompressed.
	spilledRuns := many.Bytes * int64(many.Runs-1) / int64(many.Runs)
	if many.Codecs[frame.None] > one.Codecs[frame.None] || many.spilled < spilledRuns*95/100 {
		t.Fatalf("%d runs: %d uncompressed frames stored (one run: %d), %d bytes spilled for about %d logical in the spilled runs; want none more and the small pieces spilled uncompressed",
			many.Runs, many.Codecs[frame.None], one.Codecs[frame.None], many.spilled, spilledRuns)
	}
}

// TestSpillLimit: past spill_bytes the writer fails with an error naming
// the directory, the bytes and the limit; nothing is emitted as the
// object's last chunk, and the spill is removed.
func TestSpillLimit(t *testing.T) {
	d := openSpill(t, 64<<10)
	w, sink := newSorted(t, opts(300), d)
	err := writeUntilFailure(w, 300, 200_000)
	if !errors.Is(err, spill.ErrLimit) {
		t.Fatalf("err = %v, want spill.ErrLimit", err)
	}
	for _, s := range []string{d.Root(), "65536-byte limit", "spill_bytes"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not name %q", err, s)
		}
	}
	if sink.last[0] {
		t.Fatal("the object was finished after the spill failed")
	}
	if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
		t.Fatalf("after the failure the spill holds %v (%d bytes counted)", files, d.Used())
	}
}

// TestSpillFlippedByte: a byte changed in the spill file is caught by
// its CRC32C before the frame reaches the object.
func TestSpillFlippedByte(t *testing.T) {
	d := openSpill(t, 1<<30)
	w, sink := newSorted(t, opts(300), d)
	writeScattered(t, w, 300, 45_000)
	// Everything written so far is kept or spilled once the writer is
	// idle; flip a byte in the middle of what is on disk.
	waitIdle(w)
	files := spillFiles(t, d)
	if len(files) != 1 {
		t.Fatalf("the spill holds %v, want one file", files)
	}
	name := filepath.Join(d.Path(), files[0])
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	off := fi.Size() / 2
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = w.Close()
	if err == nil || !strings.Contains(err.Error(), "CRC32C") || !strings.Contains(err.Error(), filepath.Base(name)) {
		t.Fatalf("Close after a flipped spill byte: %v, want a CRC32C error naming %s", err, name)
	}
	if sink.last[0] {
		t.Fatal("the object was finished with a corrupt spill")
	}
	if files := spillFiles(t, d); len(files) != 0 {
		t.Fatalf("after the failure the spill holds %v", files)
	}
}

// TestSpillDirRemoved: a spill directory removed under a writer fails it
// with an error naming the spill, and nothing is finished.
func TestSpillDirRemoved(t *testing.T) {
	d := openSpill(t, 1<<30)
	w, sink := newSorted(t, opts(300), d)
	if err := os.RemoveAll(d.Path()); err != nil {
		t.Fatal(err)
	}
	err := writeUntilFailure(w, 300, 45_000)
	if err == nil || !strings.Contains(err.Error(), "spill") || !strings.Contains(err.Error(), d.Root()) {
		t.Fatalf("err = %v, want an error naming the spill directory %s", err, d.Root())
	}
	if sink.last[0] {
		t.Fatal("the object was finished without its spill")
	}
}

// TestSortedAbortRemovesSpill: Abort drops the kept frames and the file.
func TestSortedAbortRemovesSpill(t *testing.T) {
	d := openSpill(t, 1<<30)
	w, _ := newSorted(t, opts(300), d)
	writeScattered(t, w, 300, 45_000)
	w.Abort(errors.New("test abort"))
	if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
		t.Fatalf("after Abort the spill holds %v (%d bytes counted)", files, d.Used())
	}
}

// TestSortedDeterministic: the same input makes the same object, byte
// for byte, however far the encoders and the appender got while it was
// written: a task rerun under the same attempt after a lost answer is
// then recognised as the same output.
func TestSortedDeterministic(t *testing.T) {
	d := openSpill(t, 1<<30)
	write := func(encoders int) []byte {
		o := opts(300)
		o.Encoders = encoders
		w, sink := newSorted(t, o, d)
		writeScattered(t, w, 300, 45_000)
		res, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Runs < 3 {
			t.Fatalf("%d runs: the test needs several", res.Runs)
		}
		return sink.object(0)
	}
	first := write(1)
	for _, enc := range []int{4, 1, 8} {
		if again := write(enc); !bytes.Equal(again, first) {
			t.Fatalf("with %d encoders the object differs: %d bytes against %d", enc, len(again), len(first))
		}
	}
}

// TestKeptFrameHoldsItsBytes: a frame kept in memory until Close holds
// a buffer of its stored size, as coalesce_budget counts it, not the
// encode buffer sized for the frame uncompressed; that buffer stays the
// encoder's (for the pool). A buffer already near its frame's size is
// kept as it is.
func TestKeptFrameHoldsItsBytes(t *testing.T) {
	k := &keeper{b: newBudget(opts(4)), file: openSpill(t, 1<<30).Create()}
	defer k.drop()
	frameOf := func(n, capacity int) encoded {
		b := bytes.NewBuffer(make([]byte, 0, capacity))
		b.Write(bytes.Repeat([]byte{7}, n))
		return encoded{partition: 1, buf: b, stats: frame.Stats{Rows: 1, Bytes: int64(capacity)}}
	}
	loose := frameOf(300_000, 1<<20)
	mem, kept, err := k.keep(loose)
	if err != nil {
		t.Fatal(err)
	}
	f := k.kept[len(k.kept)-1]
	if kept || f.buf == loose.buf || mem != 300_000 || f.buf.Len() != 300_000 || f.buf.Cap() > 300_000+300_000/8 {
		t.Fatalf("kept %v (the encode buffer: %v), %d bytes counted, buffer %d of %d capacity; want a copy of 300000 bytes, counted so",
			kept, f.buf == loose.buf, mem, f.buf.Len(), f.buf.Cap())
	}
	if !bytes.Equal(f.buf.Bytes(), loose.buf.Bytes()) {
		t.Fatal("the kept copy differs from the frame")
	}
	tight := frameOf(300_000, 310_000)
	if mem, kept, err = k.keep(tight); err != nil || !kept || mem != 300_000 || k.kept[len(k.kept)-1].buf != tight.buf {
		t.Fatalf("a tight buffer: kept %v, %d bytes, %v; want it kept as it is", kept, mem, err)
	}
}

// waitIdle returns once every frame flushed so far has been through the
// appender (kept or spilled, for a sorted writer).
func waitIdle(w *Writer) {
	for {
		w.q.mu.Lock()
		idle := w.q.outNext == w.q.seq
		w.q.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSortedAbortDuringClose: Abort while a sorted writer's Close merges
// its runs, at any point of it (before the appender queues the output,
// while the encoders merge it, after): both return, Close with the
// abort's cause unless it finished first (or ErrClosed, if Abort came
// first), and every chunk buffer and the spill are given back.
func TestSortedAbortDuringClose(t *testing.T) {
	d := openSpill(t, 1<<30)
	for i, delay := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond} {
		w, sink := newSorted(t, opts(300), d)
		writeScattered(t, w, 300, 20_000)
		closed := make(chan error, 1)
		go func() {
			_, err := w.Close()
			closed <- err
		}()
		time.Sleep(delay)
		cause := fmt.Errorf("abort %d", i)
		w.Abort(cause)
		select {
		case err := <-closed:
			t.Logf("abort after %v: Close: %v", delay, err)
			if err != nil && !errors.Is(err, cause) && !errors.Is(err, ErrClosed) {
				t.Fatalf("abort after %v: Close returned %v, want nil, ErrClosed or the abort's cause", delay, err)
			}
			if err != nil && sink.last[0] {
				t.Fatalf("abort after %v: Close failed but the object was finished", delay)
			}
		case <-time.After(time.Minute):
			t.Fatalf("abort after %v: Close did not return", delay)
		}
		sink.mu.Lock()
		held := sink.held
		sink.mu.Unlock()
		if held != 0 {
			t.Fatalf("abort after %v: %d chunk buffers still held", delay, held)
		}
		if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
			t.Fatalf("abort after %v: the spill holds %v (%d bytes counted)", delay, files, d.Used())
		}
	}
}

// TestSortedAbortWhileSpilling: Abort once a writer of many partitions
// spills, while Write still takes rows and the encoders write spilled
// runs' pieces to the spill file, at any point of it: the Write under
// way and every later one fail with the abort's cause (or ErrClosed),
// the object is never finished, and every chunk buffer, the spill file
// and its bytes are given back.
func TestSortedAbortWhileSpilling(t *testing.T) {
	d := openSpill(t, 1<<30)
	const partitions = 2000
	for i, delay := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		w, sink := newSorted(t, opts(partitions), d)
		cause := fmt.Errorf("abort %d", i)
		wrote := make(chan error, 1)
		go func() {
			var err error
			for lo := 0; err == nil; lo += 4 {
				rec := rows(memory.DefaultAllocator, lo, 4)
				err = w.Write((lo*7919/4)%partitions, rec)
				rec.Release()
			}
			wrote <- err
		}()
		deadline := time.Now().Add(time.Minute)
		for d.Used() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the writer never spilled")
			}
			time.Sleep(50 * time.Microsecond)
		}
		time.Sleep(delay)
		used := d.Used()
		w.Abort(cause)
		select {
		case err := <-wrote:
			if !errors.Is(err, cause) && !errors.Is(err, ErrClosed) {
				t.Fatalf("abort after %v: Write returned %v, want the abort's cause or ErrClosed", delay, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("abort after %v: Write did not return", delay)
		}
		if _, err := w.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("abort after %v: Close after Abort returned %v, want ErrClosed", delay, err)
		}
		sink.mu.Lock()
		held, finished := sink.held, sink.last[0]
		sink.mu.Unlock()
		if held != 0 || finished {
			t.Fatalf("abort after %v: %d chunk buffers still held, object finished %v", delay, held, finished)
		}
		if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
			t.Fatalf("abort after %v (%d bytes spilled then): the spill holds %v (%d bytes counted)", delay, used, files, d.Used())
		}
	}
}

// writeMixed writes n rows to partitions in a scattered order, as
// batches of 4 rows (copied into the run's arena) and, every fifth, of
// 700 rows (retained as they are, yet under half a frame), allocated
// from mem; it returns the ids each partition should read back.
func writeMixed(t *testing.T, w *Writer, mem memory.Allocator, partitions, n int) map[int][]int64 {
	t.Helper()
	want := map[int][]int64{}
	for lo, k := 0, 0; lo < n; k++ {
		size := 4
		if k%5 == 4 {
			size = 700
		}
		p := (k * 7919) % partitions
		rec := rows(mem, lo, size)
		err := w.Write(p, rec)
		rec.Release()
		if err != nil {
			t.Fatalf("write of rows %d: %v", lo, err)
		}
		for i := lo; i < lo+size; i++ {
			want[p] = append(want[p], int64(i))
		}
		lo += size
	}
	return want
}

// TestSortedLastRunRowsMerged: a sorted writer that spilled keeps its
// last run's small frames as rows until Close and encodes them once,
// merged with the partition's spilled pieces: every partition reads back
// its rows in write order from one frame, the object is the same with 1
// and 4 encoders, every input batch is released (a batch released twice
// or never fails the checked allocator), and nothing stays counted.
// Aborted at any point of Close, the writer releases them too.
func TestSortedLastRunRowsMerged(t *testing.T) {
	const partitions = 40
	d := openSpill(t, 1<<30)
	var first []byte
	for _, enc := range []int{1, 4} {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		o := opts(partitions)
		o.Encoders = enc
		w, sink := newSorted(t, o, d)
		want := writeMixed(t, w, mem, partitions, 60_000)
		res, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Runs < 2 || res.spilled == 0 {
			t.Fatalf("%d runs, %d bytes spilled: the test needs a last run after spilled ones", res.Runs, res.spilled)
		}
		got := decodeAll(t, sink, res)
		for p := range partitions {
			if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
				t.Fatalf("%d encoders: partition %d: %d rows back, want %d in write order", enc, p, len(got[p]), len(want[p]))
			}
		}
		// Pieces under half a frame are grouped up to 1.25 frames, and
		// a frame of at least half one is kept as it is: a group ends
		// under half a frame only where such a frame or the partition
		// ends, so no two frames in a row are under half a frame.
		half := o.FrameTargetBytes / 2
		frames, logical, short := map[int]int64{}, map[int]int64{}, map[int]bool{}
		for i, f := range res.Frames {
			if short[f.Partition] && f.Bytes < half {
				t.Fatalf("partition %d: frames %d and %d both under half of %d bytes: pieces of %d runs not merged", f.Partition, i-1, i, o.FrameTargetBytes, res.Runs)
			}
			short[f.Partition] = f.Bytes < half
			frames[f.Partition]++
			logical[f.Partition] += f.Bytes
		}
		for p, n := range frames {
			if most := 2*(logical[p]/half) + 1; n > most {
				t.Fatalf("partition %d: %d frames of %d bytes, want its pieces of %d runs merged into at most %d", p, n, logical[p], res.Runs, most)
			}
		}
		mem.AssertSize(t, 0)
		w.b.mu.Lock()
		pending, kept := w.b.pending, w.b.keptMem
		w.b.mu.Unlock()
		if pending != 0 || kept != 0 {
			t.Fatalf("after Close %d bytes pending and %d kept in memory are still counted", pending, kept)
		}
		if first == nil {
			first = sink.object(0)
		} else if !bytes.Equal(sink.object(0), first) {
			t.Fatalf("with %d encoders the object differs", enc)
		}
	}
	for i, delay := range []time.Duration{0, 200 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		w, _ := newSorted(t, opts(partitions), d)
		writeMixed(t, w, mem, partitions, 60_000)
		closed := make(chan error, 1)
		go func() {
			_, err := w.Close()
			closed <- err
		}()
		time.Sleep(delay)
		w.Abort(fmt.Errorf("abort %d", i))
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Fatalf("abort after %v: Close did not return", delay)
		}
		mem.AssertSize(t, 0)
		if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
			t.Fatalf("abort after %v: the spill holds %v (%d bytes counted)", delay, files, d.Used())
		}
	}
}

// TestSortedMergeWithoutGatherer: a schema the writer cannot copy rows
// of (a dictionary column: no arena, no gatherer) spills its runs' small
// frames as uncompressed frames and keeps its last run's as retained
// batches, and Close merges them into frames that read back every
// partition's rows in write order, with every batch released.
func TestSortedMergeWithoutGatherer(t *testing.T) {
	const partitions = 30
	dictSchema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tag", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}},
	}, nil)
	if _, ok := frame.NewAccumulator(dictSchema); ok {
		t.Fatal("the test needs a schema without a gatherer")
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	d := openSpill(t, 1<<30)
	o := opts(partitions)
	o.Schema = dictSchema
	o.CoalesceBudget = 1 << 20
	w, sink := newSorted(t, o, d)
	want := map[int][]int64{}
	for lo, k := 0, 0; lo < 30_000; k++ {
		const n = 20
		b := array.NewRecordBuilder(mem, dictSchema)
		for i := lo; i < lo+n; i++ {
			b.Field(0).(*array.Int64Builder).Append(int64(i))
			if err := b.Field(1).(*array.BinaryDictionaryBuilder).AppendString(fmt.Sprintf("tag-%d", i%7)); err != nil {
				t.Fatal(err)
			}
		}
		rec := b.NewRecordBatch()
		b.Release()
		p := (k * 7919) % partitions
		err := w.Write(p, rec)
		rec.Release()
		if err != nil {
			t.Fatalf("write of rows %d: %v", lo, err)
		}
		for i := lo; i < lo+n; i++ {
			want[p] = append(want[p], int64(i))
		}
		lo += n
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs < 2 || res.spilled == 0 {
		t.Fatalf("%d runs, %d bytes spilled: the test needs a last run after spilled ones", res.Runs, res.spilled)
	}
	got := decodeAll(t, sink, res)
	for p := range partitions {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: %d rows back, want %d in write order", p, len(got[p]), len(want[p]))
		}
	}
	if len(res.Frames) >= res.Runs*partitions {
		t.Fatalf("%d frames for %d partitions over %d runs: the pieces were not merged", len(res.Frames), partitions, res.Runs)
	}
	mem.AssertSize(t, 0)
}
