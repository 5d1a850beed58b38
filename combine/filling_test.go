package combine_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// heldGET holds the GETs of one key until a part of the task's object
// has been uploaded, or until patience runs out.
type heldGET struct {
	store.Store
	key      string
	parted   chan struct{} // closed at the first part
	once     sync.Once
	patience time.Duration

	mu     sync.Mutex
	waited bool // a held GET ran out of patience
}

func (s *heldGET) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if strings.HasSuffix(key, s.key) {
		select {
		case <-s.parted:
		case <-time.After(s.patience):
			s.mu.Lock()
			s.waited = true
			s.mu.Unlock()
		}
	}
	return s.Store.GetRange(ctx, key, off, n)
}

func (s *heldGET) UploadPart(ctx context.Context, key, id string, n int32, b store.Body) (store.Part, error) {
	p, err := s.Store.UploadPart(ctx, key, id, n, b)
	if err == nil {
		s.once.Do(func() { close(s.parted) })
	}
	return p, err
}

// TestCombineUploadsWhileFetching: a task's object goes to the store
// part by part as its GETs fill it, not after the last GET: with the
// last writer's GET held until a part of the object is uploaded, the
// task's first part (of the first writers' bytes) goes while that GET
// waits, in memory and from a file alike. The parts are those the plan
// sized, the requests those it predicted, and the stage reads back
// unchanged.
func TestCombineUploadsWhileFetching(t *testing.T) {
	for _, onDisk := range []bool{false, true} {
		name := map[bool]string{false: "memory", true: "disk"}[onDisk]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, testenv.Embedded(t))
			ctx := context.Background()
			// Four writers of 2 partitions of 3 MB each: partition 0's
			// frames fill the object's first 12 MB, the last writer's
			// from 9 MB, so its first 5 MiB part needs no byte of it.
			writeStage(t, e, "q", 4, 2, 30, 100_000)
			before, _ := readEach(t, e, "q", 2)
			m, err := e.c.OpenStage(ctx, "q", 0)
			if err != nil {
				t.Fatal(err)
			}
			last := m.Manifest().Workers[3].Objects[0].Key
			held := &heldGET{Store: e.st, key: last, parted: make(chan struct{}), patience: 10 * time.Second}
			o := combine.Options{Groups: 1, Buckets: 1}
			if onDisk {
				d, err := spill.Open(t.TempDir(), 64<<20)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				o.MemoryBytes, o.Scratch = 1<<20, &countingScratch{d: d}
			}
			start := e.counter.Requests()
			s, err := combine.Open(ctx, held, e.c.Layout(), "q", 0, o)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := s.RunTask(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if held.waited {
				t.Fatalf("the last writer's GET waited %v for a part of the task's object: the upload started only after the GETs", held.patience)
			}
			obj := tk.Manifest.Objects[0]
			if want := int((obj.Size + 5<<20 - 1) / (5 << 20)); obj.Parts != want {
				t.Errorf("the task's object of %d bytes has %d parts, want %d of 5 MiB", obj.Size, obj.Parts, want)
			}
			sealAsPredicted(t, e, s, start, before, "combining "+name)
		})
	}
}

// failingGET fails the GET of one key once a part of the task's object
// is being uploaded, and slows every part; it records when each part
// began and when the GET failed.
type failingGET struct {
	store.Store
	key    string
	parted chan struct{}
	once   sync.Once

	mu     sync.Mutex
	begun  []time.Time
	failed time.Time
}

func (s *failingGET) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if !strings.HasSuffix(key, s.key) {
		return s.Store.GetRange(ctx, key, off, n)
	}
	select {
	case <-s.parted:
	case <-time.After(10 * time.Second):
	}
	s.mu.Lock()
	s.failed = time.Now()
	s.mu.Unlock()
	return nil, &store.Error{Op: "GetObject", Key: key, Status: 403, Code: "AccessDenied"}
}

func (s *failingGET) UploadPart(ctx context.Context, key, id string, n int32, b store.Body) (store.Part, error) {
	s.mu.Lock()
	s.begun = append(s.begun, time.Now())
	s.mu.Unlock()
	s.once.Do(func() { close(s.parted) })
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return store.Part{}, ctx.Err()
	}
	return s.Store.UploadPart(ctx, key, id, n, b)
}

// TestCombineFailedFetchStopsUpload: a task whose GET fails while its
// first parts are uploading sends no part after the failure: the parts
// handed over and not yet sent are dropped, the one in flight is cut
// off, and the task fails naming the GET, leaving no upload or object.
func TestCombineFailedFetchStopsUpload(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	// Eight writers of 2 partitions of 3 MB: partition 0 fills the
	// object's first 24 MB, the last writer's from 21 MB, so four
	// parts of 5 MiB are ready before its GET answers.
	writeStage(t, e, "q", 8, 2, 30, 100_000)
	m, err := e.c.OpenStage(ctx, "q", 0)
	if err != nil {
		t.Fatal(err)
	}
	fs := &failingGET{Store: e.st, key: m.Manifest().Workers[7].Objects[0].Key, parted: make(chan struct{})}
	s, err := combine.Open(ctx, fs, e.c.Layout(), "q", 0, combine.Options{Groups: 1, Buckets: 1, Uploads: 1, PartBytes: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.RunTask(ctx, 0)
	if err == nil || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("a task whose GET failed: %v, want the GET's failure", err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, b := range fs.begun {
		if b.After(fs.failed) {
			t.Errorf("part %d of %d began %v after the GET failed", i+1, len(fs.begun), b.Sub(fs.failed))
		}
	}
	if ups, err := e.st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Errorf("uploads left: %v %v", ups, err)
	}
	if keys := planKeys(t, e, s.Plan().ID); len(keys) != 0 {
		t.Errorf("the failed task left %v", keys)
	}
}

// panicScratch makes files whose sections panic when read.
type panicScratch struct{ d *spill.Dir }

type panicFile struct{ *spill.File }

type panicReader struct{}

func (panicReader) ReadAt([]byte, int64) (int, error) { panic("scratch read panics") }

func (p panicScratch) Create(size int64, what string) (combine.ScratchFile, error) {
	f, err := p.d.CreateSized(size, what)
	return panicFile{f}, err
}

func (panicFile) Section(off, n int64) (*io.SectionReader, error) {
	return io.NewSectionReader(panicReader{}, off, n), nil
}

// TestCombineHandOverPanics: a panic while a part is handed to the
// upload (here a Scratch whose reads panic) fails the task with an
// error naming it, as a panic on the task's goroutine does, and leaves
// no upload, object or file.
func TestCombineHandOverPanics(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	writeStage(t, e, "q", 3, 2, 20, 100_000)
	d, err := spill.Open(t.TempDir(), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 1, MemoryBytes: 1 << 20, Scratch: panicScratch{d: d}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.RunAll(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "scratch read panics") || !strings.Contains(err.Error(), "combine task 0") {
		t.Fatalf("a hand-over that panics: %v, want an error naming the panic and the task", err)
	}
	if ups, err := e.st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Errorf("uploads left: %v %v", ups, err)
	}
	if keys := planKeys(t, e, s.Plan().ID); len(keys) != 0 {
		t.Errorf("the failed task left %v", keys)
	}
	if d.Used() != 0 {
		t.Errorf("%d bytes of scratch counted after the task", d.Used())
	}
}
