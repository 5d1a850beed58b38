package reader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/store"
)

// fakeSource serves ranges from the same bytes as the store, with a
// fault per behaviour.
type fakeSource struct {
	st    *memStore
	mode  string // "ok", "flip", "miss", "stall", "short"
	mu    sync.Mutex
	calls int
}

func (f *fakeSource) Fetch(ctx context.Context, r SourceRange) ([]byte, string, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	switch f.mode {
	case "miss":
		return nil, "", &SourceError{Reason: FallbackMiss, Err: fmt.Errorf("not held")}
	case "none":
		return nil, "", ErrNoSource
	case "stall":
		<-ctx.Done()
		return nil, "", ctx.Err()
	}
	f.st.mu.Lock()
	obj := f.st.objs[r.Key]
	f.st.mu.Unlock()
	b := append([]byte(nil), obj[r.Offset:r.Offset+r.Length]...)
	switch f.mode {
	case "flip":
		b[len(b)/2] ^= 0xff
	case "short":
		b = b[:len(b)-1]
	}
	return b, SourcePeer, nil
}

type counted struct {
	mu        sync.Mutex
	served    map[string]int64
	fallbacks map[string]int
}

func (c *counted) Served(source string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served[source] += n
}

func (c *counted) Fallback(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fallbacks[reason]++
}

// TestSourceFallbacks: whatever a Source does, every row arrives once in
// order; bytes are counted by source and fallbacks by reason.
func TestSourceFallbacks(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		peerAll  bool   // every byte from the source
		reason   string // fallback counted ("" none)
		hedgeGET bool   // the store answered instead
	}{
		{mode: "ok", peerAll: true},
		{mode: "flip", reason: FallbackChecksum},
		{mode: "miss", reason: FallbackMiss},
		{mode: "none"},
		{mode: "stall", reason: FallbackTimeout, hedgeGET: true},
		{mode: "short", reason: FallbackError},
	} {
		for _, opts := range []Options{{}, {RangeBytes: 1, ReadAhead: 3}} {
			t.Run(fmt.Sprintf("%s/range %d", tc.mode, opts.RangeBytes), func(t *testing.T) {
				st, m, order := buildStage(t, 4, frame.LZ4, interleaved)
				for i := range m.Workers {
					m.Workers[i].Peer = "peer:1"
				}
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				defer mem.AssertSize(t, 0)
				src := &fakeSource{st: st, mode: tc.mode}
				obs := &counted{served: map[string]int64{}, fallbacks: map[string]int{}}
				// The hedged GET is sent only where the case wants it: the
				// stalled source never answers, so its short delay is what
				// ends the wait. Every other source answers at once, and
				// its delay is one that only a stalled source reaches: on a
				// loaded machine a 20 ms timer can fire before the source's
				// goroutine runs, and then the store would serve a healthy
				// source's range, or a short answer would count as a
				// timeout.
				delay := time.Minute
				if tc.hedgeGET {
					delay = 20 * time.Millisecond
				}
				opts.Mem, opts.Source, opts.Observer, opts.SourceDelay = mem, src, obs, delay
				s := FromManifest(st, testLayout, m, opts)
				recs, err := s.ReadPartitions(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := collect(t, recs)
				recs.Release()
				if err != nil {
					t.Fatal(err)
				}
				equalRows(t, got, order)
				gets, _ := st.stats()
				obs.mu.Lock()
				defer obs.mu.Unlock()
				if src.calls == 0 {
					t.Fatal("the source was never asked")
				}
				var stored int64
				for _, b := range st.objs {
					stored += int64(len(b))
				}
				// Spans cover every byte (no gaps here); a flipped frame's bytes
				// are counted once, from the store.
				if total := obs.served[SourcePeer] + obs.served[SourceS3]; total != stored && tc.mode != "short" && tc.mode != "stall" {
					t.Fatalf("%d bytes counted by source %v, %d stored", total, obs.served, stored)
				}
				switch {
				case tc.peerAll:
					if gets != 0 || obs.served[SourceS3] != 0 || len(nonzero(obs.fallbacks)) != 0 {
						t.Fatalf("healthy source: %d GETs, served %v, fallbacks %v", gets, obs.served, obs.fallbacks)
					}
				case tc.reason == "":
					if obs.served[SourcePeer] != 0 || len(nonzero(obs.fallbacks)) != 0 || gets == 0 {
						t.Fatalf("no source: %d GETs, served %v, fallbacks %v", gets, obs.served, obs.fallbacks)
					}
				default:
					if obs.fallbacks[tc.reason] == 0 || gets == 0 || obs.served[SourceS3] == 0 || len(nonzero(obs.fallbacks)) != 1 {
						t.Fatalf("%s: %d GETs, served %v, fallbacks %v; want %s fallbacks only", tc.mode, gets, obs.served, obs.fallbacks, tc.reason)
					}
				}
				// A span of several frames with one flipped: the others come
				// from the source.
				if tc.mode == "flip" && opts.RangeBytes == 0 && obs.served[SourcePeer] == 0 {
					t.Fatalf("flip: frames around the flipped one should still come from the source: %v", obs.served)
				}
			})
		}
	}
}

func nonzero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// lateSource answers (or fails with fail) only once the store has been
// asked for a range: the hedged GET is in flight when it answers.
type lateSource struct {
	fakeSource
	asked func() int
	fail  error
}

func (l *lateSource) Fetch(ctx context.Context, r SourceRange) ([]byte, string, error) {
	for l.asked() == 0 {
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	if l.fail != nil {
		return nil, "", l.fail
	}
	return l.fakeSource.Fetch(ctx, r)
}

// failingStore answers every GET with err.
type failingStore struct {
	mu   sync.Mutex
	gets int
	err  error
}

func (f *failingStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	f.mu.Lock()
	f.gets++
	f.mu.Unlock()
	return nil, f.err
}

func (f *failingStore) asked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

// TestSourceRaceAfterTheHedge: once the hedged GET is sent, a Source
// that answers still wins and the GET is cancelled, every byte counted
// from the Source and no fallback; when the Source then fails and the
// GET fails too, the read fails with the store's error and the Source's
// failure is counted under its reason.
func TestSourceRaceAfterTheHedge(t *testing.T) {
	for _, opts := range []Options{{}, {RangeBytes: 1, ReadAhead: 3}} {
		t.Run(fmt.Sprintf("source wins/range %d", opts.RangeBytes), func(t *testing.T) {
			st, m, order := buildStage(t, 4, frame.LZ4, interleaved)
			for i := range m.Workers {
				m.Workers[i].Peer = "peer:1"
			}
			st.block = true // a GET answers only by being cancelled
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			src := &lateSource{fakeSource: fakeSource{st: st, mode: "ok"}, asked: func() int { g, _ := st.stats(); return g }}
			obs := &counted{served: map[string]int64{}, fallbacks: map[string]int{}}
			opts.Mem, opts.Source, opts.Observer, opts.SourceDelay = mem, src, obs, time.Millisecond
			recs, err := FromManifest(st, testLayout, m, opts).ReadPartitions(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := collect(t, recs)
			recs.Release()
			if err != nil {
				t.Fatal(err)
			}
			equalRows(t, got, order)
			var stored int64
			for _, b := range st.objs {
				stored += int64(len(b))
			}
			gets, _ := st.stats()
			st.mu.Lock()
			inFlight := st.inFlight
			st.mu.Unlock()
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if gets == 0 || inFlight != 0 {
				t.Fatalf("%d hedged GETs sent, %d still in flight; want some sent, all cancelled", gets, inFlight)
			}
			if obs.served[SourcePeer] != stored || obs.served[SourceS3] != 0 || len(nonzero(obs.fallbacks)) != 0 {
				t.Fatalf("served %v, fallbacks %v; want all %d bytes from the peer and no fallback", obs.served, obs.fallbacks, stored)
			}
		})
		t.Run(fmt.Sprintf("both fail/range %d", opts.RangeBytes), func(t *testing.T) {
			st, m, _ := buildStage(t, 4, frame.LZ4, interleaved)
			for i := range m.Workers {
				m.Workers[i].Peer = "peer:1"
			}
			fs := &failingStore{err: &store.Error{Op: "GetObject", Key: "the key", Status: 503, Err: errors.New("store on fire")}}
			src := &lateSource{fakeSource: fakeSource{st: st, mode: "ok"}, asked: fs.asked,
				fail: &SourceError{Reason: FallbackUnavailable, Err: errors.New("peer went away")}}
			obs := &counted{served: map[string]int64{}, fallbacks: map[string]int{}}
			opts.Source, opts.Observer, opts.SourceDelay = src, obs, time.Millisecond
			recs, err := FromManifest(fs, testLayout, m, opts).ReadPartitions(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := collect(t, recs)
			recs.Release()
			if len(got) != 0 {
				t.Fatalf("%d rows read from nowhere", len(got))
			}
			mustContain(t, err, "got 0 of", "store on fire")
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if f := nonzero(obs.fallbacks); len(f) != 1 || f[FallbackUnavailable] == 0 || obs.served[SourcePeer] != 0 {
				t.Fatalf("fallbacks %v, served %v; want the unavailable peer counted and nothing served by it", obs.fallbacks, obs.served)
			}
		})
	}
}
