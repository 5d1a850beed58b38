package combine_test

import (
	"context"
	"io"
	"slices"
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
			if _, err := s.Seal(ctx); err != nil {
				t.Fatal(err)
			}
			spent := e.counter.Requests()
			for k, v := range start {
				spent[k] -= v
			}
			puts := spent["PutObject"] + spent["CreateMultipartUpload"] + spent["UploadPart"] + spent["CompleteMultipartUpload"] + spent["ListObjectsV2"]
			if pr := s.Plan().Predict; puts != pr.Combine.PUT || spent["GetObject"] != pr.Combine.GET {
				t.Errorf("combining made %d PUT-class requests and %d GETs, the plan predicted %d and %d", puts, spent["GetObject"], pr.Combine.PUT, pr.Combine.GET)
			}
			after, _ := readEach(t, e, "q", 2)
			if !slices.Equal(after, before) {
				t.Errorf("combined: %+v, as written: %+v", after, before)
			}
		})
	}
}
