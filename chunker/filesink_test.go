package chunker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// fileSink is a memSink whose objects take sections of files: it reads
// each section back, checks its CRC32C (a checked one's mismatch fails
// it, as the uploader's reads do), and records the sections, the size
// hints, the files' release and the bytes handed over in place.
type fileSink struct {
	*memSink
	refuse error // Create's answer for an object from disk, if set

	fmu      sync.Mutex
	sizes    map[int]int64 // Create's estimate per object
	sections map[int][]int64
	release  map[int]func()
	inPlace  map[int]int64 // bytes of kept frames handed over in place, per object
}

func newFileSink(t *testing.T) *fileSink {
	return &fileSink{memSink: newSink(t, testChunk, 4),
		sizes: map[int]int64{}, sections: map[int][]int64{}, release: map[int]func(){}, inPlace: map[int]int64{}}
}

func (s *fileSink) Limit(onDisk bool) int64 { return s.chunkSize * store.MaxParts }

func (s *fileSink) Create(size int64, onDisk bool, release func()) (Object, error) {
	if !onDisk {
		return s.memSink.Create(size, false, nil)
	}
	if s.refuse != nil {
		return nil, s.refuse
	}
	s.mu.Lock()
	obj := s.created
	s.created++
	s.mu.Unlock()
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.sizes[obj], s.release[obj] = size, release
	return &fileObject{s: s, obj: obj}, nil
}

// fileObject is an object of a fileSink.
type fileObject struct {
	s   *fileSink
	obj int
}

func (o *fileObject) Write([]byte) error {
	return fmt.Errorf("object %d: Write to an object from disk", o.obj)
}

func (o *fileObject) WriteSection(sec Section) error {
	r, err := sec.File.Section(sec.Off, sec.N)
	if err != nil {
		return err
	}
	b := make([]byte, sec.N)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	if got := store.CRC32C(b); got != sec.CRC32C {
		if sec.Check {
			return fmt.Errorf("spill %s: bytes [%d, %d) have CRC32C %08x, written as %08x: the spill file changed on disk", sec.File.Name(), sec.Off, sec.Off+sec.N, got, sec.CRC32C)
		}
		o.s.t.Errorf("object %d: section of CRC32C %08x, handed over with %08x", o.obj, got, sec.CRC32C)
	}
	o.s.fmu.Lock()
	o.s.sections[o.obj] = append(o.s.sections[o.obj], sec.N)
	if sec.Check {
		o.s.inPlace[o.obj] += sec.N
	}
	o.s.fmu.Unlock()
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if o.s.last[o.obj] {
		o.s.t.Errorf("object %d: section after Finish", o.obj)
	}
	o.s.objects[o.obj] = append(o.s.objects[o.obj], b)
	return nil
}

func (o *fileObject) Finish() error {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	o.s.last[o.obj] = true
	return nil
}

func (o *fileObject) Abort() {}

func newFileSorted(t *testing.T, o Options, d *spill.Dir) (*Writer, *fileSink) {
	t.Helper()
	sink := newFileSink(t)
	o.Spill = d
	w, err := New(t.Context(), o, sink)
	if err != nil {
		t.Fatal(err)
	}
	return w, sink
}

// TestSortedFileParts: a sorted writer whose runs spilled writes its
// object to a file in its spill directory and hands it over as sections
// of the file, its size estimated at Create: no chunk buffer is taken,
// every row reads back in write order, and the file stays, counted
// against the spill limit, until the object releases it.
func TestSortedFileParts(t *testing.T) {
	const partitions = 300
	d := openSpill(t, 1<<30)
	w, sink := newFileSorted(t, opts(partitions), d)
	want := writeScattered(t, w, partitions, 45_000)
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.spilled == 0 || len(res.Objects) != 1 {
		t.Fatalf("%d bytes spilled, %d objects: want a spilled writer of one object", res.spilled, len(res.Objects))
	}
	size := res.Objects[0].Size
	var handed int64
	for _, n := range sink.sections[0] {
		handed += n
	}
	if est := sink.sizes[0]; handed != size || est < size/2 || est > 2*size {
		t.Fatalf("object of %d bytes: %d bytes handed over in %d sections, estimated at %d", size, handed, len(sink.sections[0]), est)
	}
	if sink.peak != 0 {
		t.Fatalf("the writer took %d chunk buffers for an object in a file", sink.peak)
	}
	got := decodeAll(t, sink.memSink, res)
	for p := range partitions {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: %d rows back, want %d in write order", p, len(got[p]), len(want[p]))
		}
	}
	// Its pieces all merged, the object takes no frame in place: the
	// runs' file went at Close, and the object's own file holds it all.
	if files := spillFiles(t, d); sink.inPlace[0] != 0 || len(files) != 1 || d.Used() != size {
		t.Fatalf("before the sink released it the spill holds %v, %d bytes counted (%d bytes in place); want the object's file of %d bytes",
			files, d.Used(), sink.inPlace[0], size)
	}
	sink.release[0]()
	if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
		t.Fatalf("after the release the spill holds %v (%d bytes counted)", files, d.Used())
	}
}

// TestSortedFileRefused: an object the objects refuse to create (too
// large for its parts) fails Close with their error; nothing is handed
// over, and the spill is empty.
func TestSortedFileRefused(t *testing.T) {
	d := openSpill(t, 1<<30)
	w, sink := newFileSorted(t, opts(64), d)
	sink.refuse = errors.New("object 0: 9 bytes is more than max_part_size")
	writeScattered(t, w, 64, 30_000)
	_, err := w.Close()
	if err == nil || !strings.Contains(err.Error(), "more than max_part_size") {
		t.Fatalf("Close: %v, want the sink's refusal", err)
	}
	if len(sink.objects) != 0 || len(sink.release) != 0 {
		t.Fatalf("the refused object handed over %d objects, %d files", len(sink.objects), len(sink.release))
	}
	if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
		t.Fatalf("after the refusal the spill holds %v (%d bytes counted)", files, d.Used())
	}
}

// waitAppended waits until w's appender has taken every frame flushed so
// far (nothing is pending).
func waitAppended(t *testing.T, w *Writer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		w.b.mu.Lock()
		pending := w.b.pending
		w.b.mu.Unlock()
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of flushed frames still pending after 30 s", pending)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSortedFileNoRoom: when the spill limit has no room for the object
// beside the runs, the object goes out in chunks as before.
func TestSortedFileNoRoom(t *testing.T) {
	const partitions = 64
	probe := openSpill(t, 1<<30)
	w, sink := newFileSorted(t, opts(partitions), probe)
	writeScattered(t, w, partitions, 30_000)
	// Both writers let the appender take every flushed frame before
	// Close: a frame it takes after Close starts stays in memory rather
	// than go to the spill, so on a loaded machine the probe could spill
	// less than the writer measured against it.
	waitAppended(t, w)
	res, err := w.Close()
	if err != nil || res.spilled == 0 || len(sink.sections[0]) == 0 {
		t.Fatalf("probe: %v, %d bytes spilled, sections %v", err, res.spilled, sink.sections[0])
	}
	sink.release[0]()
	d := openSpill(t, res.spilled+res.spilled/4)
	w, sink = newFileSorted(t, opts(partitions), d)
	want := writeScattered(t, w, partitions, 30_000)
	waitAppended(t, w)
	res, err = w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(sink.sections) != 0 || len(sink.objects[0]) < 2 {
		t.Fatalf("with no room for the object: sections %v, %d chunks; want chunks only", sink.sections, len(sink.objects[0]))
	}
	got := decodeAll(t, sink.memSink, res)
	for p := range partitions {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: rows differ", p)
		}
	}
}

// TestSortedFileInPlace: the spilled frames an object takes as they are
// are not read back nor written again: each is a section of the runs'
// file in its part, which stays until the sink releases the object, and
// the object's own file holds only the frames merged at Close. Every row
// reads back in write order. Nothing is left in the spill once
// released.
func TestSortedFileInPlace(t *testing.T) {
	const partitions = 4
	o := opts(partitions)
	d := openSpill(t, 1<<30)
	w, sink := newFileSorted(t, o, d)
	want := writeScattered(t, w, partitions, 200_000)
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	size := res.Objects[0].Size
	t.Logf("object of %d bytes in parts of %v, %d bytes in place, %d spilled in %d runs", size, sink.sections[0], sink.inPlace[0], res.spilled, res.Runs)
	if res.Runs < 3 || sink.inPlace[0] < size/2 {
		t.Fatalf("%d runs, %d of the object's %d bytes in place: want most of a many-run object's frames copied in place", res.Runs, sink.inPlace[0], size)
	}
	got := decodeAll(t, sink.memSink, res)
	for p := range partitions {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: %d rows back, want %d in write order", p, len(got[p]), len(want[p]))
		}
	}
	if files := spillFiles(t, d); len(files) != 2 || d.Used() != res.spilled+size-sink.inPlace[0] {
		t.Fatalf("before the release the spill holds %v, %d bytes counted; want the runs' %d and the object's own %d", files, d.Used(), res.spilled, size-sink.inPlace[0])
	}
	sink.release[0]()
	if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
		t.Fatalf("after the release the spill holds %v (%d bytes counted)", files, d.Used())
	}

	// A byte of a frame in place changed on disk before the object read
	// it: Close fails, naming the spill file.
	w, sink = newFileSorted(t, o, d)
	writeScattered(t, w, partitions, 200_000)
	waitAppended(t, w)
	runs := spillFiles(t, d)
	if len(runs) != 1 {
		t.Fatalf("before Close the spill holds %v, want the runs' file", runs)
	}
	flipByte(t, filepath.Join(d.Path(), runs[0]), 100)
	if _, err = w.Close(); err == nil || !strings.Contains(err.Error(), "the spill file changed on disk") {
		t.Fatalf("Close with a byte changed in the spill: %v", err)
	}
	for _, release := range sink.release {
		release()
	}
	if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
		t.Fatalf("after the failure the spill holds %v (%d bytes counted)", files, d.Used())
	}
}

// flipByte inverts the byte at off of the file name.
func flipByte(t *testing.T, name string, off int64) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
