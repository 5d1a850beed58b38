package uploader

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/testkit/leaktest"
	"github.com/durashuffle/durashuffle/store"
)

// buggyStore is an in-memory store whose writes of keys starting with
// "bad" panic, as a store implementation with a bug would: Put, the
// UploadPart of part panicPart, or CreateMultipart (after creating the
// upload, so that its ID is lost with the panic).
type buggyStore struct {
	*streamingMem
	panicPart   int32
	panicCreate bool
}

func (s *buggyStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	if strings.HasPrefix(key, "bad") {
		panic("a bug in Put")
	}
	return s.streamingMem.Put(ctx, key, body, o)
}

func (s *buggyStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	if strings.HasPrefix(key, "bad") && n == s.panicPart {
		panic("a bug in UploadPart")
	}
	return s.streamingMem.UploadPart(ctx, key, id, n, body)
}

func (s *buggyStore) CreateMultipart(ctx context.Context, key string) (string, error) {
	id, err := s.streamingMem.CreateMultipart(ctx, key)
	if strings.HasPrefix(key, "bad") && s.panicCreate {
		panic("a bug in CreateMultipart")
	}
	return id, err
}

// committed lists what the store holds under key: objects and open
// multipart uploads.
func committed(t *testing.T, st *buggyStore, key string) (objects, uploads int) {
	t.Helper()
	objs, _, err := st.List(context.Background(), key, "")
	if err != nil {
		t.Fatal(err)
	}
	ups, err := st.ListUploads(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return len(objs), len(ups)
}

// TestPanicFailsTheObject: a store that panics in a pool worker (or in
// Prepare's goroutine) fails that object with a *safe.PanicError naming
// the panic: its upload is aborted, its buffers are back in the pool,
// nothing of it is stored, no goroutine is left behind, and the same pool
// uploads the next object.
func TestPanicFailsTheObject(t *testing.T) {
	tests := []struct {
		name   string
		st     func() *buggyStore
		cfg    Config
		chunks int
		warm   bool // upload objects first, so the hedger hedges
		prep   bool
		want   []string
	}{
		{name: "a single put", st: func() *buggyStore { return &buggyStore{streamingMem: newStreamingMem()} },
			chunks: 1, want: []string{"panic in upload of part 1 of bad: a bug in Put (at uploader.(*buggyStore).Put (panic_test.go:"}},
		{name: "a part", st: func() *buggyStore { return &buggyStore{streamingMem: newStreamingMem(), panicPart: 3} },
			chunks: 5, want: []string{"panic in upload of part 3 of bad: a bug in UploadPart (at uploader.(*buggyStore).UploadPart"}},
		{name: "a hedged part", st: func() *buggyStore { return &buggyStore{streamingMem: newStreamingMem(), panicPart: 2} },
			cfg: Config{HedgeFactor: 100, HedgeMin: time.Minute}, chunks: 4, warm: true,
			want: []string{"upload part 2 of bad (1024 bytes): panic in a request: a bug in UploadPart"}},
		{name: "the create", st: func() *buggyStore { return &buggyStore{streamingMem: newStreamingMem(), panicCreate: true} },
			chunks: 3, want: []string{"create multipart upload bad: panic in the store's CreateMultipart: a bug in CreateMultipart"}},
		{name: "the create of Prepare", st: func() *buggyStore { return &buggyStore{streamingMem: newStreamingMem(), panicCreate: true} },
			prep: true, want: []string{"create multipart upload bad: panic in the store's CreateMultipart: a bug in CreateMultipart"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			st := tc.st()
			cfg := tc.cfg
			cfg.ChunkSize, cfg.Concurrency, cfg.MaxBuffered, cfg.Checksum, cfg.CleanupTimeout = testChunk, 2, 4, true, time.Second
			p := New(st, cfg, nil)
			if tc.warm {
				for range 3 { // 9 parts: past the hedger's warmup
					o := p.newUpload(context.Background(), "warm", nil)
					write(t, p, o, 3)
					if _, err := o.Finish(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				if p.hdg.Delay() == 0 {
					t.Fatal("the hedger is not warm: the part would not run in Do's goroutine")
				}
			}
			var mu sync.Mutex
			var fails []error
			o := p.newUpload(context.Background(), "bad", func(err error) { mu.Lock(); fails = append(fails, err); mu.Unlock() })
			if tc.prep {
				o.prepare()
			} else {
				// A submit after the panic returns the object's failure.
				for i := 1; i <= tc.chunks; i++ {
					buf, err := p.acquire(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					if err := o.submit(int32(i), append(buf, make([]byte, testChunk)...), i == tc.chunks); err != nil && !safe.IsPanic(err) {
						t.Fatalf("submit part %d: %v", i, err)
					}
				}
			}
			_, err := o.Finish(context.Background())
			var pe *safe.PanicError
			if !errors.As(err, &pe) || len(pe.Stack) == 0 {
				t.Fatalf("Finish: %v, want a PanicError with its stack", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Finish: %v, want it to contain %q", err, w)
				}
			}
			mu.Lock()
			if len(fails) != 1 || !safe.IsPanic(fails[0]) {
				t.Errorf("onFail heard %v, want the panic once", fails)
			}
			mu.Unlock()
			if objs, ups := committed(t, st, "bad"); objs != 0 || ups != 0 {
				t.Errorf("the store holds %d objects and %d open uploads of the failed object, want none", objs, ups)
			}
			if b := p.Stats().Buffered; b != 0 {
				t.Errorf("%d buffers held after the failure, want all back in the pool", b)
			}
			// The workers serve on.
			next := p.newUpload(context.Background(), "next", nil)
			write(t, p, next, 3)
			if res, err := next.Finish(context.Background()); err != nil || res.Parts != 3 {
				t.Fatalf("the next object: %+v, %v", res, err)
			}
			p.Close()
			leaktest.Settled(t, base)
		})
	}
}
