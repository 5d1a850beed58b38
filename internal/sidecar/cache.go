package sidecar

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
)

// stageCacheFrames bounds the sealed stage manifests kept in memory, in
// frame index entries (about 100 bytes each with their keys): some 25 MiB.
// A stage with more frames than this is never cached.
const stageCacheFrames = 1 << 18

// stageCache keeps opened sealed stages, least recently used out. A
// sealed stage never changes, so every DoGet of its partitions after the
// first costs no manifest GET: a reader of P partitions pays one manifest
// GET, not P. Unsealed stages are not cached (workers may still commit).
// A cached stage deleted behind the sidecar's back is noticed by the
// NotFound of its data objects, evicted, and reloaded once.
type stageCache struct {
	mu     sync.Mutex
	frames int
	ll     *list.List // of *cachedStage, most recent first
	byKey  map[stageKey]*list.Element
}

type stageKey struct {
	query string
	stage int
}

type cachedStage struct {
	key    stageKey
	st     *reader.Stage
	frames int
}

func (c *stageCache) get(k stageKey) *reader.Stage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*cachedStage).st
	}
	return nil
}

func (c *stageCache) put(k stageKey, st *reader.Stage) {
	n := 0
	for _, w := range st.Manifest().Workers {
		n += len(w.Frames)
	}
	if n > stageCacheFrames {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ll == nil {
		c.ll, c.byKey = list.New(), map[stageKey]*list.Element{}
	}
	if _, ok := c.byKey[k]; ok {
		return
	}
	c.byKey[k] = c.ll.PushFront(&cachedStage{key: k, st: st, frames: n})
	c.frames += n
	for c.frames > stageCacheFrames {
		c.removeLocked(c.ll.Back())
	}
}

// evict drops one stage, or every stage of the query when stage < 0.
func (c *stageCache) evict(query string, stage int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.byKey {
		if k.query == query && (stage < 0 || k.stage == stage) {
			c.removeLocked(e)
		}
	}
}

func (c *stageCache) removeLocked(e *list.Element) {
	cs := c.ll.Remove(e).(*cachedStage)
	delete(c.byKey, cs.key)
	c.frames -= cs.frames
}

// openStage returns a stage ready to read: from the cache, or loaded (one
// GET when sealed) and cached if sealed. cached says which.
func (s *Server) openStage(ctx context.Context, query string, stage int) (st *reader.Stage, cached bool, err error) {
	k := stageKey{query, stage}
	if st := s.stages.get(k); st != nil {
		return st, true, nil
	}
	m, err := manifest.LoadStage(ctx, s.st, s.c.Layout(), query, stage)
	if err != nil {
		return nil, false, err
	}
	st = reader.FromManifest(s.st, s.c.Layout(), m, s.rd)
	if st.Schema() == nil {
		return nil, false, fmt.Errorf("%w: %s stage %d: its schema does not decode", manifest.ErrCorrupt, query, stage)
	}
	if m.Sealed {
		s.stages.put(k, st)
	}
	return st, false, nil
}
