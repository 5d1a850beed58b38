package reader

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/safe"
)

// buggyStore is a memStore with a bug: once armed, a GET of the key bad
// panics, in GetRange itself (inGet) or in its body's first Read.
type buggyStore struct {
	*memStore
	bad   string
	inGet bool
	armed atomic.Bool
}

func (s *buggyStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if !s.armed.Load() || key != s.bad {
		return s.memStore.GetRange(ctx, key, off, length)
	}
	if s.inGet {
		panic("a bug in GetRange")
	}
	body, err := s.memStore.GetRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	return panicBody{body}, nil
}

type panicBody struct{ io.ReadCloser }

func (panicBody) Read([]byte) (int, error) { panic("a bug in Read") }

// bombDecoder is the stage's decoder with a bug: once armed, it panics.
type bombDecoder struct {
	decoder
	armed atomic.Bool
}

func (d *bombDecoder) Decode(b []byte, mem memory.Allocator) ([]arrow.RecordBatch, error) {
	if d.armed.Load() {
		panic("a bug in the decoder")
	}
	return d.decoder.Decode(b, mem)
}

// buggySource is a Source whose Fetch panics.
type buggySource struct{}

func (buggySource) Fetch(context.Context, SourceRange) ([]byte, string, error) {
	panic("a bug in the Source")
}

// buggyObserver panics on the first bytes served.
type buggyObserver struct{}

func (buggyObserver) Served(string, int64) { panic("a bug in the Observer") }
func (buggyObserver) Fallback(string)      {}

// TestPanicFailsTheStream: a panic while fetching or decoding, in any of
// the stream's goroutines or in Next's own decoding, ends the stream with
// a *safe.PanicError naming the panic and where it happened (Err, after
// the frames before it), instead of ending the process. Every goroutine
// of the stream exits and every buffer it allocated is released.
func TestPanicFailsTheStream(t *testing.T) {
	tests := []struct {
		name   string
		read   string // "partitions": groups of partitions, decoded in Next; "stored": spans decoded as they arrive
		inGet  bool
		decode bool // the decoder panics, not the store
		hedge  bool
		source bool
		obs    bool // the Observer panics: no inner recover contains it
		want   []string
	}{
		{name: "a body read, span by span", read: "stored",
			want: []string{"got 0 of", "panic in the store's ranged GET: a bug in Read (at reader.panicBody.Read (panic_test.go:"}},
		{name: "a GET, span by span", read: "stored", inGet: true,
			want: []string{"panic in the store's ranged GET: a bug in GetRange (at reader.(*buggyStore).GetRange (panic_test.go:"}},
		{name: "a body read, in a group of partitions", read: "partitions",
			want: []string{"got 0 of", "panic in the store's ranged GET: a bug in Read"}},
		{name: "a hedged span", read: "stored", hedge: true,
			want: []string{"panic in the store's ranged GET: a bug in Read"}},
		{name: "a hedged range of a group", read: "partitions", hedge: true,
			want: []string{"got 0 of", "panic in the store's ranged GET: a bug in Read"}},
		{name: "the Source", read: "stored", source: true,
			want: []string{"panic in the Source's Fetch: a bug in the Source (at reader.buggySource.Fetch (panic_test.go:"}},
		{name: "the Observer, span by span", read: "stored", obs: true,
			want: []string{"panic in fetch of t/q1/stage-3/worker-", "bytes [0, ", "a bug in the Observer (at reader.buggyObserver.Served (panic_test.go:"}},
		{name: "the Observer, in a group of partitions", read: "partitions", obs: true,
			want: []string{"got 0 of", "panic in the fetch of a range: a bug in the Observer"}},
		{name: "the decoder, span by span", read: "stored", decode: true,
			want: []string{"panic in decode of the frame of partition", "a bug in the decoder"}},
		{name: "the decoder, in Next", read: "partitions", decode: true,
			want: []string{"panic in decode of the frame of partition 0 at offset", "a bug in the decoder"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms, m, order := buildStage(t, 4, frame.LZ4, interleaved)
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			// Worker 1's second object holds frames of partitions 0 and 2.
			bad := testLayout.ObjectKey(testQuery, testStage, m.Workers[1].Objects[1].Key)
			st := &buggyStore{memStore: ms, bad: bad, inGet: tc.inGet}
			o := Options{Mem: mem, ReadAhead: 2}
			if tc.hedge {
				o.Hedge = NewHedger(100, 1<<40) // hedges nothing: each request runs in Do's goroutine
			}
			if tc.source {
				o.Source = buggySource{}
			}
			if tc.obs {
				o.Observer = buggyObserver{}
			}
			s := FromManifest(st, testLayout, m, o)
			dec := &bombDecoder{decoder: s.dec}
			s.dec = dec
			read := func() (*Records, error) {
				if tc.read == "stored" {
					return s.ReadStored(context.Background(), nil)
				}
				return s.ReadPartitions(context.Background(), nil)
			}
			if tc.hedge {
				// Warm the hedger, so that its Do runs each request in a
				// goroutine of its own.
				for range 2 {
					recs, err := read()
					if err != nil {
						t.Fatal(err)
					}
					got, err := collect(t, recs)
					recs.Release()
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != len(order) {
						t.Fatalf("%d rows, want %d", len(got), len(order))
					}
				}
				if o.Hedge.h.Delay() == 0 {
					t.Fatal("the hedger is not warm")
				}
			}
			base := runtime.NumGoroutine()
			if tc.decode {
				dec.armed.Store(true)
			} else {
				st.armed.Store(true)
			}
			recs, err := read()
			if err != nil {
				t.Fatal(err)
			}
			got, err := collect(t, recs)
			recs.Release()
			var pe *safe.PanicError
			if !errors.As(err, &pe) || len(pe.Stack) == 0 {
				t.Fatalf("Err = %v after %d rows, want a PanicError with its stack", err, len(got))
			}
			t.Logf("after %d rows: %v", len(got), err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Err = %v, want it to contain %q", err, w)
				}
			}
			if !tc.decode && !tc.source && !tc.obs && !strings.Contains(err.Error(), bad) {
				t.Errorf("Err = %v, want it to name the object %s", err, bad)
			}
			if len(got) >= len(order) {
				t.Errorf("%d rows delivered of %d: the stream did not fail", len(got), len(order))
			}
			noLeak(t, base)
		})
	}
}
