package uploader

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// diskFile is an object's bytes in a spill file on disk.
type diskFile struct {
	f    *spill.File
	data []byte
}

func newDiskFile(t *testing.T, size int) *diskFile {
	t.Helper()
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(size), 1))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	dir, err := spill.Open(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	f := dir.Create()
	if _, err := f.Append(data); err != nil {
		t.Fatal(err)
	}
	return &diskFile{f: f, data: data}
}

// section is bytes [off, end) of d as a section, checked or not.
func (d *diskFile) section(off, end int64, check bool) chunker.Section {
	return chunker.Section{File: d.f, Off: off, N: end - off, CRC32C: store.CRC32C(d.data[off:end]), Check: check}
}

// emitSections writes d's bytes to the sink's next object from disk, in
// sections of 1 KiB as a sorted writer's merge hands them over (every
// other one checked, as a kept frame is), and returns the parts the
// upload stored; released counts the file's release.
func emitSections(t *testing.T, s *Sink, d *diskFile, released *atomic.Int32) *Upload {
	t.Helper()
	size := int64(len(d.data))
	o, err := s.Create(size, true, func() { released.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	for off, i := int64(0), 0; off < size; i++ {
		end := min(off+1<<10, size)
		if err := o.WriteSection(d.section(off, end, i%2 == 1)); err != nil {
			t.Fatalf("section [%d, %d): %v", off, end, err)
		}
		off = end
	}
	if err := o.Finish(); err != nil {
		t.Fatal(err)
	}
	objs := s.Take()
	return objs[len(objs)-1]
}

// stored returns the bytes of key in st, failing t when it is missing.
func stored(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	rc, err := st.GetRange(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSectionPartsSizedByObject: an object uploaded from a file is cut in
// about Config.Concurrency equal parts, behind a first part of the least
// size when they are at least twice that, within the part sizes allowed,
// every part a file section; its bytes are stored whole, no chunk buffer
// is taken, and the file is released once the upload completes.
func TestSectionPartsSizedByObject(t *testing.T) {
	tests := []struct {
		name                               string
		size                               int
		concurrency                        int
		chunk, minPart, maxPart, wantParts int64
		// orFewer: parts sized by the send rate measured so far are
		// larger (never smaller than a chunk), so there may be fewer, but
		// at least two.
		orFewer bool
	}{
		// One part per connection, and a first part of the least size in
		// front of them.
		{name: "one part per connection", size: 100 << 10, concurrency: 4, minPart: 1 << 10, wantParts: 5},
		{name: "never under the minimum part", size: 3 << 10, concurrency: 8, minPart: 1 << 10, wantParts: 3},
		{name: "never over the most a part takes", size: 100 << 10, concurrency: 2, minPart: 1 << 10, maxPart: 30 << 10, wantParts: 5},
		{name: "one part", size: 5 << 10, concurrency: 1, minPart: 1 << 10, wantParts: 1},
		{name: "never smaller than a chunk", size: 100 << 10, concurrency: 8, chunk: 20 << 10, minPart: 1 << 10, wantParts: 6, orFewer: true},
		{name: "no first part apart under twice the least", size: 6 << 10, concurrency: 4, minPart: 2 << 10, wantParts: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &store.Mem{}
			chunk := cmp.Or(tc.chunk, testChunk)
			p := New(st, Config{ChunkSize: chunk, Concurrency: tc.concurrency, Checksum: true, MinPartSize: tc.minPart, MaxPartSize: tc.maxPart}, nil)
			defer p.Close()
			s := p.NewSink(context.Background(), SinkOptions{Key: func(int) string { return "obj" }})
			if s.Limit(true) == 0 {
				t.Fatal("a sink with no Keeper takes no sections")
			}
			d := newDiskFile(t, tc.size)
			var released atomic.Int32
			res, err := emitSections(t, s, d, &released).Finish(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if ok := int64(res.Parts) == tc.wantParts || tc.orFewer && res.Parts >= 2 && int64(res.Parts) < tc.wantParts; !ok || res.Size != int64(tc.size) {
				t.Fatalf("%d bytes at concurrency %d: stored %d parts of %d bytes, want %d parts", tc.size, tc.concurrency, res.Parts, res.Size, tc.wantParts)
			}
			if got := stored(t, st, "obj"); !bytes.Equal(got, d.data) {
				t.Fatalf("stored %d bytes, not the file's %d", len(got), len(d.data))
			}
			if peak := p.Stats().PeakBuffered; peak != 0 {
				t.Fatalf("the pool held %d chunk buffers for an object of file sections, want none", peak)
			}
			if n := released.Load(); n != 1 {
				t.Fatalf("the file was released %d times, want once", n)
			}
		})
	}
}

// flakySections is a store whose first request of each part (by number)
// reads half of its section, then fails as a connection reset does.
type flakySections struct {
	*store.Mem
	mu     sync.Mutex
	failed map[int32]bool
}

func (s *flakySections) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	s.mu.Lock()
	first := !s.failed[n]
	s.failed[n] = true
	s.mu.Unlock()
	if first {
		half := make([]byte, body.Size()/2)
		if _, err := io.ReadFull(body.Reader(), half); err != nil {
			return store.Part{}, err
		}
		return store.Part{}, &store.Error{Op: "UploadPart", Key: key, Retryable: true, Err: errors.New("connection reset by peer")}
	}
	return s.Mem.UploadPart(ctx, key, id, n, body)
}

// TestSectionPartRetriedFromDisk: a part that fails halfway is sent again
// by the retry layer from its first byte, read again from disk, not from
// memory (the pool holds no buffer of it): the object is stored intact.
func TestSectionPartRetriedFromDisk(t *testing.T) {
	const size = 64 << 10
	flaky := &flakySections{Mem: &store.Mem{}, failed: map[int32]bool{}}
	st := retry.Wrap(flaky, retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, nil)
	p := New(st, Config{ChunkSize: testChunk, Concurrency: 4, Checksum: true, MinPartSize: 1 << 10}, nil)
	defer p.Close()
	s := p.NewSink(context.Background(), SinkOptions{Key: func(int) string { return "obj" }})
	d := newDiskFile(t, size)
	var released atomic.Int32
	res, err := emitSections(t, s, d, &released).Finish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(t, flaky.Mem, "obj"); res.Parts < 2 || !bytes.Equal(got, d.data) || len(flaky.failed) != res.Parts {
		t.Fatalf("stored %d parts (%d failed once), %d bytes; want every part retried, the file's %d bytes", res.Parts, len(flaky.failed), len(got), size)
	}
	if peak := p.Stats().PeakBuffered; peak != 0 {
		t.Fatalf("the pool held %d chunk buffers, want none: a retried section is not held in memory", peak)
	}
}

// stallingSections holds the first request of one part until it is cut
// off (a straggler); every other request is answered at once.
type stallingSections struct {
	*store.Mem
	stall   int32
	stalled atomic.Bool
}

func (s *stallingSections) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	if n == s.stall && s.stalled.CompareAndSwap(false, true) {
		<-ctx.Done()
		return store.Part{}, ctx.Err()
	}
	return s.Mem.UploadPart(ctx, key, id, n, body)
}

// TestSectionPartHedged: a part of file sections that straggles is sent
// once more, read again from disk, and the hedge's answer stores it.
func TestSectionPartHedged(t *testing.T) {
	const size = 64 << 10
	st := &stallingSections{Mem: &store.Mem{}}
	p := New(st, Config{ChunkSize: testChunk, Concurrency: 4, Checksum: true, MinPartSize: 1 << 10, HedgeFactor: 2, HedgeMin: 20 * time.Millisecond}, nil)
	defer p.Close()
	for range 3 { // 9 parts: past the hedger's warmup
		o := p.newUpload(context.Background(), "warm", nil)
		write(t, p, o, 3)
		if _, err := o.Finish(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	st.stall = 2
	s := p.NewSink(context.Background(), SinkOptions{Key: func(int) string { return "obj" }})
	d := newDiskFile(t, size)
	var released atomic.Int32
	up := emitSections(t, s, d, &released)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := up.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hedged, won := p.Hedged()
	if !st.stalled.Load() || hedged != 1 || won != 1 {
		t.Fatalf("part 2 stalled %v; hedged %d, won %d: want the straggler hedged once and the hedge to win", st.stalled.Load(), hedged, won)
	}
	if got := stored(t, st.Mem, "obj"); res.Parts < 2 || !bytes.Equal(got, d.data) {
		t.Fatalf("stored %d parts, %d bytes; want the file's %d bytes", res.Parts, len(got), size)
	}
	if held := p.Stats().Buffered; held != 0 {
		t.Fatalf("the pool holds %d chunk buffers, want none", held)
	}
}

// TestSectionObjectOverLimit: an object of more than MaxPartSize x 10,000
// bytes is refused before any request, naming it, its size and the
// limit; aborted, it leaves no upload and no object.
func TestSectionObjectOverLimit(t *testing.T) {
	st := &store.Mem{}
	p := New(st, Config{ChunkSize: testChunk, Concurrency: 4, Checksum: true, MinPartSize: 1 << 10, MaxPartSize: 1 << 10}, nil)
	defer p.Close()
	s := p.NewSink(context.Background(), SinkOptions{Key: func(int) string { return "big" }})
	const size = 1<<10*store.MaxParts + 1
	_, err := s.Create(size, true, nil)
	for _, want := range []string{"object big", "10240001 bytes", "max_part_size (1024 bytes)", "10000 parts = 10240000 bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Create of %d bytes from disk: %v, want an error containing %q", size, err, want)
		}
	}
	for _, o := range s.Take() {
		if err := o.Abort(); err != nil {
			t.Fatal(err)
		}
	}
	ups, err := st.ListUploads(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	objs, _, err := st.List(context.Background(), "", "")
	if err != nil || len(ups) != 0 || len(objs) != 0 {
		t.Fatalf("after the refusal the store holds uploads %v and objects %v (%v), want none", ups, objs, err)
	}
}

// TestSectionPlanCreatesEarly: creating an object from disk creates its
// multipart upload at once, before its first section, so the first part
// leaves as soon as its bytes are on disk; the send rate is unknown (0)
// until a part's answer, then the rate it was sent at. A checked section
// whose bytes changed on disk fails the object.
func TestSectionPlanCreatesEarly(t *testing.T) {
	st := &store.Mem{}
	p := New(st, Config{ChunkSize: testChunk, Concurrency: 4, Checksum: true, MinPartSize: 1 << 10}, nil)
	defer p.Close()
	s := p.NewSink(context.Background(), SinkOptions{Key: func(int) string { return "obj" }})
	d := newDiskFile(t, 64<<10)
	var released atomic.Int32
	o, err := s.Create(int64(len(d.data)), true, func() { released.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ups, err := st.ListUploads(context.Background(), "obj")
		if err != nil {
			t.Fatal(err)
		}
		if len(ups) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no multipart upload of obj 10 s after its parts were planned (%d uploads)", len(ups))
		}
		time.Sleep(time.Millisecond)
	}
	if r := p.sendRate(); r != 0 {
		t.Fatalf("send rate %g before any part was sent, want 0 (unknown)", r)
	}
	n := int64(len(d.data))
	if err := o.WriteSection(d.section(0, n, false)); err != nil {
		t.Fatal(err)
	}
	if err := o.Finish(); err != nil {
		t.Fatal(err)
	}
	res, err := s.Take()[0].Finish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Five parts planned, a first one of 1 KiB; those after it are
	// sized by the send and merge rates, the last taking the rest.
	if res.Parts < 2 || res.Parts > 5 || !bytes.Equal(stored(t, st, "obj"), d.data) || released.Load() != 1 {
		t.Fatalf("stored %d parts (want 2 to 5), bytes equal %v, file released %d times", res.Parts, bytes.Equal(stored(t, st, "obj"), d.data), released.Load())
	}
	if r := p.sendRate(); r <= 0 {
		t.Fatalf("send rate %g once parts were sent, want their rate", r)
	}

	// A kept frame whose bytes changed on disk after it was handed over.
	s2 := p.NewSink(context.Background(), SinkOptions{Key: func(int) string { return "bad" }})
	o, err = s2.Create(n, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	sec := d.section(0, n, true)
	sec.CRC32C++
	if err := o.WriteSection(sec); err == nil {
		err = o.Finish()
	}
	if err != nil {
		t.Fatalf("a changed section failed at once: %v; want it found as parts read it", err)
	}
	if _, err := s2.Take()[0].Finish(context.Background()); !errors.Is(err, store.ErrBodyChanged) {
		t.Fatalf("Finish of an object whose section changed on disk: %v, want store.ErrBodyChanged", err)
	}
}

// sizedParts records the size of every part stored and holds each
// UploadPart until open is closed, so that no part's answer (and so no
// send rate) is known while the object's sections are handed over.
type sizedParts struct {
	*store.Mem
	open  chan struct{}
	mu    sync.Mutex
	sizes map[int32]int64
}

func (s *sizedParts) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	<-s.open
	s.mu.Lock()
	s.sizes[n] = body.Size()
	s.mu.Unlock()
	return s.Mem.UploadPart(ctx, key, id, n, body)
}

// TestSectionPartSchedule: with the send rate unknown, an object from
// disk planned with a first part apart is cut into a first part of the
// least size, then parts of about equal size, the last smaller by the
// first's (its connection sent the first); every part is handed to the
// pool before the last section arrives.
func TestSectionPartSchedule(t *testing.T) {
	const size = 100 << 10
	st := &sizedParts{Mem: &store.Mem{}, open: make(chan struct{}), sizes: map[int32]int64{}}
	p := New(st, Config{ChunkSize: 1 << 10, Concurrency: 4, Checksum: true, MinPartSize: 1 << 10}, nil)
	defer p.Close()
	s := p.NewSink(context.Background(), SinkOptions{Key: func(int) string { return "obj" }})
	d := newDiskFile(t, size)
	var released atomic.Int32
	up := emitSections(t, s, d, &released)
	close(st.open)
	res, err := up.Finish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Parts != 5 || !bytes.Equal(stored(t, st.Mem, "obj"), d.data) {
		t.Fatalf("stored %d parts, want 5 (a first of 1 KiB, then 4)", res.Parts)
	}
	sizes := st.sizes
	if sizes[1] != 1<<10 {
		t.Fatalf("parts %v: want the first of the least, 1024 bytes", sizes)
	}
	// Sections of 1 KiB, every other one checked and so never cut: a
	// part may pass its size by one section.
	mid := []int64{sizes[2], sizes[3], sizes[4]}
	for _, m := range mid {
		if d := m - mid[0]; d < -1<<10 || d > 1<<10 {
			t.Fatalf("parts %v: want the middle ones equal within a section", sizes)
		}
	}
	if sizes[5] >= mid[0] {
		t.Fatalf("parts %v: want the last smaller than the others", sizes)
	}
}

// TestSectionCheckedCutPastMostPart: a checked section (a kept frame)
// that would take its part past MaxPartSize is cut, each piece read back
// once for its CRC32C; the object is stored intact in parts of at most
// MaxPartSize. A checked section whose bytes changed on disk before it
// was cut fails WriteSection, naming the spill file.
func TestSectionCheckedCutPastMostPart(t *testing.T) {
	const size = 30 << 10
	st := &sizedParts{Mem: &store.Mem{}, open: make(chan struct{}), sizes: map[int32]int64{}}
	close(st.open)
	p := New(st, Config{ChunkSize: 1 << 10, Concurrency: 2, Checksum: true, MinPartSize: 1 << 10, MaxPartSize: 4 << 10}, nil)
	defer p.Close()
	s := p.NewSink(context.Background(), SinkOptions{Key: func(int) string { return "obj" }})
	d := newDiskFile(t, size)
	o, err := s.Create(size, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < size; off += 3 << 10 {
		if err := o.WriteSection(d.section(off, min(off+3<<10, size), true)); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Finish(); err != nil {
		t.Fatal(err)
	}
	res, err := s.Take()[0].Finish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored(t, st.Mem, "obj"), d.data) || res.Parts < size/(4<<10) {
		t.Fatalf("stored %d parts of an object of %d bytes, at most 4 KiB each", res.Parts, size)
	}
	for n, sz := range st.sizes {
		if sz > 4<<10 {
			t.Fatalf("part %d: %d bytes, over MaxPartSize", n, sz)
		}
	}

	o, err = s.Create(size, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.WriteSection(d.section(0, 3<<10, true)); err != nil {
		t.Fatal(err)
	}
	sec := d.section(3<<10, 9<<10, true) // past MaxPartSize: cut
	sec.CRC32C ^= 1
	if err := o.WriteSection(sec); err == nil || !strings.Contains(err.Error(), "the spill file changed on disk") || !strings.Contains(err.Error(), d.f.Name()) {
		t.Fatalf("a changed section cut in two: %v, want an error naming the spill file", err)
	}
	o.Abort()
	for _, up := range s.Take() {
		_ = up.Abort()
	}
}

// TestSectionPartsShareThePool: objects from disk that upload at once
// divide the pool's connections among them: with as many objects as
// connections, each takes one part (the first object, alone when it was
// planned, a first part apart too), where one alone takes about one part
// per connection; every object is stored intact.
func TestSectionPartsShareThePool(t *testing.T) {
	const size, objects = 64 << 10, 8
	st := &store.Mem{}
	p := New(st, Config{ChunkSize: 1 << 10, Concurrency: objects, Checksum: true, MinPartSize: 1 << 10}, nil)
	defer p.Close()
	s := p.NewSink(context.Background(), SinkOptions{Key: func(i int) string { return fmt.Sprintf("obj-%d", i) }})
	d := newDiskFile(t, size)
	objs := make([]chunker.Object, objects)
	for i := range objs {
		o, err := s.Create(size, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		objs[i] = o
	}
	for off := int64(0); off < size; off += 1 << 10 {
		for _, o := range objs {
			if err := o.WriteSection(d.section(off, off+1<<10, false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	parts := 0
	for i, up := range s.Take() {
		if err := objs[i].Finish(); err != nil {
			t.Fatal(err)
		}
		res, err := up.Finish(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Parts > 2 || !bytes.Equal(stored(t, st, up.Key()), d.data) {
			t.Fatalf("%s: %d parts, want at most 2 with %d objects sharing %d connections", up.Key(), res.Parts, objects, objects)
		}
		parts += res.Parts
	}
	if parts > objects+1 {
		t.Fatalf("%d parts for %d objects sharing the pool, want at most %d", parts, objects, objects+1)
	}
	if n := p.fromDisk.Load(); n != 0 {
		t.Fatalf("%d objects from disk still counted after every upload ended", n)
	}
}
