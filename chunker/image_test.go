package chunker

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// fileSink is a memSink that takes a spilled object as file sections,
// planned in four parts of at least minPart, and checks the FileSink
// contract: the file handed over before the first section, parts in
// order, every section's bytes on disk with their CRC32C, every part but
// the last at least minPart.
type fileSink struct {
	*memSink
	refuse  error // PlanParts' answer, if set
	minPart int64

	fmu      sync.Mutex
	sizes    map[int]int64 // PlanParts' estimate per object
	parts    map[int]int64 // the least part per object
	sections map[int][]int64
	release  map[int]func()
}

func newFileSink(t *testing.T) *fileSink {
	return &fileSink{memSink: newSink(t, 100_000, 4), minPart: 10_000,
		sizes: map[int]int64{}, parts: map[int]int64{}, sections: map[int][]int64{}, release: map[int]func(){}}
}

func (s *fileSink) FileParts() bool { return true }

func (s *fileSink) PlanParts(obj int, size int64) (int, int64, int64, error) {
	if s.refuse != nil {
		return 0, 0, 0, s.refuse
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	part := max((size+3)/4, s.minPart)
	s.sizes[obj], s.parts[obj] = size, s.minPart
	return int((size + part - 1) / part), s.minPart, 1 << 30, nil
}

func (s *fileSink) OwnFile(obj int, release func()) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.release[obj] = release
}

func (s *fileSink) EmitSection(obj int, part int32, body *io.SectionReader, crc uint32, last bool) error {
	b := make([]byte, body.Size())
	if _, err := io.ReadFull(io.NewSectionReader(body, 0, body.Size()), b); err != nil {
		return err
	}
	s.fmu.Lock()
	if s.release[obj] == nil {
		s.t.Errorf("object %d: section before its file was handed over", obj)
	}
	if !last && body.Size() < s.parts[obj] {
		s.t.Errorf("object %d part %d: %d bytes, under the least a part takes, %d", obj, part, body.Size(), s.parts[obj])
	}
	s.sections[obj] = append(s.sections[obj], body.Size())
	s.fmu.Unlock()
	if got := store.CRC32C(b); got != crc {
		s.t.Errorf("object %d part %d: CRC32C %08x, handed over with %08x", obj, part, got, crc)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last[obj] || int(part) != len(s.objects[obj])+1 {
		s.t.Errorf("object %d: part %d out of order or after the last", obj, part)
	}
	s.objects[obj] = append(s.objects[obj], b)
	s.last[obj] = last
	return nil
}

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
// object to a file in its spill directory and hands it over in parts
// sized by the object (here four), each a section of the file: no chunk
// buffer is taken, every row reads back in write order, and the file
// stays, counted against the spill limit, until the sink releases it.
func TestSortedFileParts(t *testing.T) {
	const partitions = 300
	d := openSpill(t, 1<<30)
	w, sink := newFileSorted(t, opts(partitions), d)
	want := writeScattered(t, w, partitions, 45_000)
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Spilled == 0 || len(res.Objects) != 1 {
		t.Fatalf("%d bytes spilled, %d objects: want a spilled writer of one object", res.Spilled, len(res.Objects))
	}
	size := res.Objects[0].Size
	t.Logf("object of %d bytes (estimated %d) in parts of %v", size, sink.sizes[0], sink.sections[0])
	if n := len(sink.sections[0]); n != 4 || res.Objects[0].Parts != 4 {
		t.Fatalf("object of %d bytes handed over in %d sections (%d parts in the result), want 4", size, n, res.Objects[0].Parts)
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
	if files := spillFiles(t, d); len(files) != 1 || d.Used() != size {
		t.Fatalf("before the sink released it the spill holds %v, %d bytes counted; want the object's file of %d bytes", files, d.Used(), size)
	}
	sink.release[0]()
	if files := spillFiles(t, d); len(files) != 0 || d.Used() != 0 {
		t.Fatalf("after the release the spill holds %v (%d bytes counted)", files, d.Used())
	}
}

// TestSortedFileRefused: an object the sink refuses (too large for its
// parts) fails Close with the sink's error; nothing is handed over, and
// the spill is empty.
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

// TestSortedFileNoRoom: when the spill limit has no room for the object
// beside the runs, the object goes out in chunks as before.
func TestSortedFileNoRoom(t *testing.T) {
	const partitions = 64
	probe := openSpill(t, 1<<30)
	w, sink := newFileSorted(t, opts(partitions), probe)
	writeScattered(t, w, partitions, 30_000)
	res, err := w.Close()
	if err != nil || res.Spilled == 0 || len(sink.sections[0]) == 0 {
		t.Fatalf("probe: %v, %d bytes spilled, sections %v", err, res.Spilled, sink.sections[0])
	}
	sink.release[0]()
	d := openSpill(t, res.Spilled+res.Spilled/4)
	w, sink = newFileSorted(t, opts(partitions), d)
	want := writeScattered(t, w, partitions, 30_000)
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
