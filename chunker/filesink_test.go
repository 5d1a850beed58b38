package chunker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

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
	refuse error // PlanParts' answer, if set
	// beforeRead, if set, runs before each section is read.
	beforeRead func(obj int, part int32, body *io.SectionReader)
	minPart    int64
	maxPart    int64   // the most a part may hold; 0: 1 GiB
	first      bool    // plan a first part of minPart apart
	rate       float64 // SendRate's answer
	// fileAtFirst is the object's file size when its first part was
	// handed over.
	fileAtFirst int64

	fmu      sync.Mutex
	sizes    map[int]int64 // PlanParts' estimate per object
	parts    map[int]int64 // the least part per object
	sections map[int][]int64
	release  map[int]func()
	inPlace  map[int]int64 // bytes of kept frames copied in place, per object
}

func newFileSink(t *testing.T) *fileSink {
	return &fileSink{memSink: newSink(t, 100_000, 4), minPart: 10_000,
		sizes: map[int]int64{}, parts: map[int]int64{}, sections: map[int][]int64{}, release: map[int]func(){}, inPlace: map[int]int64{}}
}

func (s *fileSink) FileParts() bool { return true }

func (s *fileSink) SendRate() float64 { return s.rate }

func (s *fileSink) PlanParts(obj int, size int64) (int, int64, int64, int64, error) {
	if s.refuse != nil {
		return 0, 0, 0, 0, s.refuse
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	most := s.maxPart
	if most == 0 {
		most = 1 << 30
	}
	part := min(max((size+3)/4, s.minPart), most)
	s.sizes[obj], s.parts[obj] = size, s.minPart
	parts := int((size + part - 1) / part)
	if s.first && parts > 1 {
		return parts + 1, s.minPart, s.minPart, most, nil
	}
	return parts, 0, s.minPart, most, nil
}

func (s *fileSink) OwnFile(obj int, release func()) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.release[obj] = release
}

func (s *fileSink) EmitSection(obj int, part int32, body *io.SectionReader, crc uint32, last bool) error {
	if s.beforeRead != nil {
		s.beforeRead(obj, part, body)
	}
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
	if s.maxPart > 0 && body.Size() > s.maxPart {
		s.t.Errorf("object %d part %d: %d bytes, over the most a part takes, %d", obj, part, body.Size(), s.maxPart)
	}
	s.sections[obj] = append(s.sections[obj], body.Size())
	if r, _, _ := body.Outer(); r != nil {
		for _, e := range r.(*partReader).exts {
			if e.check {
				s.inPlace[obj] += e.n
			} else if part == 1 {
				// The object's own file (written by this goroutine).
				s.fileAtFirst = max(s.fileAtFirst, e.file.Size())
			}
		}
	}
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
	if res.spilled == 0 || len(res.Objects) != 1 {
		t.Fatalf("%d bytes spilled, %d objects: want a spilled writer of one object", res.spilled, len(res.Objects))
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

// TestPartSize: the parts partSize cuts one after another carry the bytes
// given, in the parts given, each 1 + r times the next, so that parts
// handed over as they are merged, each on a connection of its own
// sending r times as fast as the merge, all end together; with r 0 they
// are equal.
func TestPartSize(t *testing.T) {
	const left = 1 << 30
	for _, tc := range []struct {
		parts int
		r     float64
	}{{8, 0}, {8, 0.02}, {8, 0.25}, {8, 1}, {8, 4}, {1, 0.5}, {2, 0.1}, {64, 0.05}} {
		t.Run(fmt.Sprintf("%d parts, r %g", tc.parts, tc.r), func(t *testing.T) {
			var sizes []int64
			rest := int64(left)
			for k := tc.parts; k >= 1; k-- {
				s := partSize(rest, k, tc.r)
				if s <= 0 || s > rest {
					t.Fatalf("part %d of %d: %d bytes with %d left", len(sizes)+1, tc.parts, s, rest)
				}
				sizes = append(sizes, s)
				rest -= s
			}
			if rest != 0 {
				t.Fatalf("parts %v leave %d bytes", sizes, rest)
			}
			// In time units of the merge: part k is ready when its bytes
			// are merged and takes size / r to send.
			var merged int64
			var ends []float64
			for i, s := range sizes {
				merged += s
				if tc.r == 0 {
					if d := s - sizes[0]; d < -1 || d > 1 {
						t.Fatalf("with r 0, part %d is %d bytes, the first %d: want equal parts", i+1, s, sizes[0])
					}
					continue
				}
				ends = append(ends, float64(merged)+float64(s)/tc.r)
			}
			for i, e := range ends {
				if math.Abs(e-ends[0]) > 2/tc.r+2 {
					t.Fatalf("parts %v end at %v (merge time units): part %d does not end with the first", sizes, ends, i+1)
				}
			}
		})
	}
}

// TestSortedFilePartSchedule: a spilled writer's object planned with a
// first part apart is handed over in ascending parts, the first of the
// least size, none but the last under it, and the first before the merge
// is over (the file holds less than the object then). With the send rate
// unknown, the parts after the first are equal, the last the first's size
// smaller (its connection sent the first). With a connection known to
// send far faster than the merge writes (SendRate), the second part
// carries nearly all the rest: sent that fast, a part merged later gains
// nothing, and fewer parts cost fewer requests. Every row reads back in
// write order either way.
func TestSortedFilePartSchedule(t *testing.T) {
	const partitions = 200
	for _, tc := range []struct {
		name string
		rate float64
	}{{"send rate unknown", 0}, {"connection far faster than the merge", 1 << 50}} {
		t.Run(tc.name, func(t *testing.T) {
			d := openSpill(t, 1<<30)
			sink := newFileSink(t)
			sink.first, sink.rate = true, tc.rate
			o := opts(partitions)
			o.Spill = d
			w, err := New(t.Context(), o, sink)
			if err != nil {
				t.Fatal(err)
			}
			want := writeScattered(t, w, partitions, 60_000)
			res, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			secs := sink.sections[0]
			size := res.Objects[0].Size
			t.Logf("object of %d bytes (estimated %d) in parts of %v", size, sink.sizes[0], secs)
			if res.spilled == 0 || len(res.Objects) != 1 || len(secs) < 2 || len(secs) > 5 || res.Objects[0].Parts != len(secs) {
				t.Fatalf("%d bytes spilled, %d objects, sections %v: want one spilled object in 2 to 5 parts", res.spilled, len(res.Objects), secs)
			}
			if secs[0] != sink.minPart {
				t.Fatalf("first part of %d bytes, want the least, %d", secs[0], sink.minPart)
			}
			if sink.fileAtFirst <= 0 || sink.fileAtFirst >= size {
				t.Fatalf("the file held %d bytes when the first part was handed over, of an object of %d: want it handed over before the merge ended", sink.fileAtFirst, size)
			}
			if tc.rate > 0 {
				if secs[1] < size*9/10 {
					t.Fatalf("parts %v: want the second to carry nearly all the object", secs)
				}
			} else {
				if len(secs) != 5 {
					t.Fatalf("parts %v: want 5", secs)
				}
				mid, last := secs[1:4], secs[4]
				for _, s := range mid {
					if d := s - mid[0]; d < -mid[0]/10 || d > mid[0]/10 {
						t.Fatalf("parts %v: want the middle ones equal within a tenth", secs)
					}
				}
				if last >= mid[0] {
					t.Fatalf("parts %v: want the last smaller than the others", secs)
				}
			}
			got := decodeAll(t, sink.memSink, res)
			for p := range partitions {
				if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
					t.Fatalf("partition %d: %d rows back, want %d in write order", p, len(got[p]), len(want[p]))
				}
			}
			sink.release[0]()
		})
	}
}

// TestSortedFileInPlace: the spilled frames an object takes as they are
// are not read back nor written again: each is a section of the runs'
// file in its part, which stays until the sink releases the object, and
// the object's own file holds only the frames merged at Close. Every row
// reads back in write order. A byte of such a frame changed on disk
// fails the read of its part, naming the spill file and the checksums,
// and Close with it; nothing is left in the spill once released.
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

	// Parts of at most 2.5 frames: a frame that would take its part past
	// that is read back and cut across two parts.
	w, sink = newFileSorted(t, o, d)
	sink.maxPart = 150_000
	want = writeScattered(t, w, partitions, 200_000)
	res, err = w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("parts of at most 150000 bytes: %v, %d bytes in place", sink.sections[0], sink.inPlace[0])
	if n := len(sink.sections[0]); sink.inPlace[0] == 0 || n < int(res.Objects[0].Size/150_000) {
		t.Fatalf("%d parts of at most 150000 bytes, %d bytes in place, for an object of %d", n, sink.inPlace[0], res.Objects[0].Size)
	}
	got = decodeAll(t, sink.memSink, res)
	for p := range partitions {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("parts of at most 150000 bytes: partition %d: %d rows back, want %d in write order", p, len(got[p]), len(want[p]))
		}
	}
	sink.release[0]()

	w, sink = newFileSorted(t, o, d)
	flipped := false
	sink.beforeRead = func(obj int, part int32, body *io.SectionReader) {
		r, _, _ := body.Outer()
		for _, e := range r.(*partReader).exts {
			if e.check && !flipped {
				flipByte(t, e.file.Name(), e.off+e.n/2)
				flipped = true
			}
		}
	}
	writeScattered(t, w, partitions, 200_000)
	_, err = w.Close()
	if !flipped || err == nil || !strings.Contains(err.Error(), "the spill file changed on disk") {
		t.Fatalf("Close with a byte changed in the spill (changed: %v): %v", flipped, err)
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

// TestPartReader: a part read from its extents gives their bytes, in
// order, to any number of readers reading side by side in pieces of any
// size, at any offset, and again; a changed byte of a checked extent
// fails every read of that extent's end, however the reads are cut, and
// never a read of other extents.
func TestPartReader(t *testing.T) {
	d := openSpill(t, 1<<30)
	f := d.Create()
	defer f.Remove()
	var whole []byte
	var exts []extent
	for i, n := range []int{3000, 70_000, 1, 250_000, 40} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*31 + j*7)
		}
		off, err := f.Append(b)
		if err != nil {
			t.Fatal(err)
		}
		whole = append(whole, b...)
		exts = append(exts, extent{file: f, off: off, n: int64(n), check: i%2 == 1, crc: store.CRC32C(b)})
	}
	read := func(r *partReader, step int, from int64) ([]byte, error) {
		var out []byte
		for off := from; off < r.size; off += int64(step) {
			b := make([]byte, min(int64(step), r.size-off))
			if _, err := r.ReadAt(b, off); err != nil {
				return out, err
			}
			out = append(out, b...)
		}
		return out, nil
	}
	r, err := newPartReader(exts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, step := range []int{1 << 20, 4096, 333, 65_536} {
		wg.Go(func() {
			got, err := read(r, step, 0)
			if err != nil || !bytes.Equal(got, whole) {
				t.Errorf("reads of %d bytes: %d bytes back (%v), want the part's %d", step, len(got), err, len(whole))
			}
		})
	}
	wg.Wait()
	if got, err := read(r, 1000, 200_000); err != nil || !bytes.Equal(got, whole[200_000:]) {
		t.Fatalf("a read from offset 200000: %v", err)
	}

	// A byte changed in the fourth extent (checked): a reader that starts
	// past it, or reads in any pieces, fails at that extent's end.
	flipByte(t, f.Name(), exts[3].off+1000)
	for _, tc := range []struct {
		step int
		from int64
	}{{1 << 20, 0}, {777, 0}, {4096, exts[3].off + 5000}} {
		r, err := newPartReader(exts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := read(r, tc.step, tc.from)
		if err == nil || !strings.Contains(err.Error(), "the spill file changed on disk") || !strings.Contains(err.Error(), f.Name()) {
			t.Fatalf("reads of %d from %d over a changed byte: %v", tc.step, tc.from, err)
		}
		if end := exts[3].off + exts[3].n; tc.from+int64(len(got)) > end {
			t.Fatalf("reads of %d from %d: %d bytes read past the changed extent's end, %d", tc.step, tc.from, len(got), end)
		}
		if _, err := r.ReadAt(make([]byte, 10), exts[4].off); err != nil {
			t.Fatalf("a read of the next extent: %v", err)
		}
		if _, err := r.ReadAt(make([]byte, 10), exts[3].off+exts[3].n-10); err == nil {
			t.Fatalf("a read of the changed extent's end after it failed: no error")
		}
	}
}
