package sidecar

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
)

// stageCacheBytes bounds the memory of the stages kept open, in bytes:
// each sealed stage's manifest (worker headers and the index's offset
// table, about its stored size) plus its partition summary once
// GetFlightInfo has loaded it (32 bytes a partition). Frame entries are
// never cached: each read fetches its partitions' entries from the
// index. A stage larger than this is never cached.
const stageCacheBytes = 64 << 20

// stageCache keeps opened sealed stages, least recently used out. A
// sealed stage never changes, so every DoGet of its partitions after the
// first costs no manifest GET: a reader of P partitions pays one manifest
// GET, not P (and one ranged index GET per read). Unsealed stages are not
// cached (workers may still commit). A cached stage deleted behind the
// sidecar's back is noticed by the NotFound of its index or data
// objects, evicted, and reloaded once.
type stageCache struct {
	mu    sync.Mutex
	bytes int64
	max   int64      // 0: stageCacheBytes
	ll    *list.List // of *cachedStage, most recent first
	byKey map[stageKey]*list.Element
}

type stageKey struct {
	query string
	stage int
}

type cachedStage struct {
	key     stageKey
	st      *reader.Stage
	bytes   int64
	summary []manifest.PartitionStats
}

func (c *stageCache) limit() int64 {
	if c.max > 0 {
		return c.max
	}
	return stageCacheBytes
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
	n := st.Manifest().MemSize()
	if n > c.limit() {
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
	c.byKey[k] = c.ll.PushFront(&cachedStage{key: k, st: st, bytes: n})
	c.bytes += n
	c.trimLocked()
}

func (c *stageCache) trimLocked() {
	for c.bytes > c.limit() && c.ll.Len() > 0 {
		c.removeLocked(c.ll.Back())
	}
}

// summary returns st's partition summary, from the cache when st is the
// cached stage and its summary was loaded before; a loaded summary is
// kept with the stage, counted against the bound.
func (c *stageCache) summary(ctx context.Context, st *reader.Stage) ([]manifest.PartitionStats, error) {
	m := st.Manifest()
	k := stageKey{m.Query, m.Stage}
	c.mu.Lock()
	if e, ok := c.byKey[k]; ok {
		if cs := e.Value.(*cachedStage); cs.st == st && cs.summary != nil {
			c.mu.Unlock()
			return cs.summary, nil
		}
	}
	c.mu.Unlock()
	sum, err := st.Summary(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		if cs := e.Value.(*cachedStage); cs.st == st && cs.summary == nil {
			add := int64(len(sum)) * int64(unsafe.Sizeof(manifest.PartitionStats{}))
			cs.summary = sum
			cs.bytes += add
			c.bytes += add
			c.ll.MoveToFront(e)
			c.trimLocked()
		}
	}
	return sum, nil
}

// size returns the stages cached and their bytes, for tests.
func (c *stageCache) size() (stages int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ll == nil {
		return 0, 0
	}
	return c.ll.Len(), c.bytes
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
	c.bytes -= cs.bytes
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
