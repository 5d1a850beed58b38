package sidecar_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// stallStageGet reads the stage manifest at once but, when armed, hands
// it over only when released: a DoGet whose openStage loaded the first
// level just before a combine seal.
type stallStageGet struct {
	store.Store
	mu      sync.Mutex
	armed   bool
	stalled chan struct{}
	release chan struct{}
	keys    []string
}

func (s *stallStageGet) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	stall := s.armed && strings.HasSuffix(key, "/stage-0/manifest.json")
	if stall {
		s.armed = false
	}
	s.mu.Unlock()
	if !stall {
		return s.Store.GetRange(ctx, key, off, length)
	}
	body, err := s.Store.GetRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		return nil, err
	}
	close(s.stalled)
	<-s.release
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (s *stallStageGet) takeKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys
	s.keys = nil
	return k
}

// TestCacheRaceWithCombineSeal: a DoGet loads the first level's stage
// manifest, and a combine seal publishes and evicts the cached stage
// before the DoGet caches what it loaded: it does not cache it, and a
// DoGet started after the seal reads the combined level.
func TestCacheRaceWithCombineSeal(t *testing.T) {
	ss := &stallStageGet{stalled: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, testenv.Embedded(t), envOptions{wrap: func(st store.Store) store.Store { ss.Store = st; return ss }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writeWorkers(t, e, "cr", 0, 3, 4, 50)
	if _, err := e.sc.Seal(ctx, "cr", 0, 3); err != nil {
		t.Fatal(err)
	}
	ss.mu.Lock()
	ss.armed = true
	ss.mu.Unlock()
	got1 := make(chan error, 1)
	go func() {
		_, rows, err := doGet(ctx, e.fc, flightclient.Ticket{Query: "cr", Stage: 0})
		if err == nil && len(rows) != 600 {
			t.Errorf("first DoGet: %d rows", len(rows))
		}
		got1 <- err
	}()
	<-ss.stalled
	all, err := e.sc.Combine(ctx, flightclient.CombineRequest{Query: "cr", Stage: 0, Groups: 3, Buckets: 2})
	if err != nil || !all.Sealed || !all.Combined {
		t.Fatalf("combine: %+v %v", all, err)
	}
	close(ss.release)
	if err := <-got1; err != nil {
		t.Fatal(err)
	}
	ss.takeKeys()
	_, rows, err := doGet(ctx, e.fc, flightclient.Ticket{Query: "cr", Stage: 0})
	if err != nil || len(rows) != 600 {
		t.Fatalf("second DoGet: %d rows, %v", len(rows), err)
	}
	keys := ss.takeKeys()
	combined := false
	for _, k := range keys {
		if strings.Contains(k, "combine-") {
			combined = true
		}
	}
	if !combined {
		t.Errorf("a DoGet started after the combine seal read the first level (%d keys: %v): the stage cached by a DoGet that raced the seal's evict", len(keys), keys)
	}
}
