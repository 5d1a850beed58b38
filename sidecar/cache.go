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
	// evictions counts evict calls: a stage loaded before one (a
	// combine seal's, a delete's) may be the level it dropped, and is
	// not cached (put's since).
	evictions uint64
}

// generation is the evictions so far, for put's since.
func (c *stageCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evictions
}

type stageKey struct {
	query string
	stage int
	key   string // keyTag of the key the stage was opened with
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

func (c *stageCache) put(k stageKey, st *reader.Stage, since uint64) {
	n := st.Manifest().MemSize()
	if n > c.limit() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.evictions != since {
		return // loaded before an eviction: perhaps what it dropped
	}
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
	c.mu.Lock()
	if e := c.elementOf(st); e != nil {
		if cs := e.Value.(*cachedStage); cs.summary != nil {
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
	if e := c.elementOf(st); e != nil {
		if cs := e.Value.(*cachedStage); cs.summary == nil {
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

// elementOf returns st's element when st is cached (under whichever key
// opened it), else nil. The caller holds c.mu.
func (c *stageCache) elementOf(st *reader.Stage) *list.Element {
	m := st.Manifest()
	for k, e := range c.byKey {
		if k.query == m.Query && k.stage == m.Stage && e.Value.(*cachedStage).st == st {
			return e
		}
	}
	return nil
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
	c.evictions++
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
//
// The stage is opened with the call's key (flightclient.KeyHeader), else, for an
// encrypted stage, with the client's own; cached stages are told apart by
// the key they were opened with, so a call never reads through a stage
// another call's key opened.
func (s *Server) openStage(ctx context.Context, query string, stage int) (st *reader.Stage, cached bool, err error) {
	key, err := s.callKey(ctx)
	if err != nil {
		return nil, false, err
	}
	k := stageKey{query, stage, keyTag(key)}
	if st := s.stages.get(k); st != nil {
		return st, true, nil
	}
	gen := s.stages.generation()
	m, err := manifest.LoadStage(ctx, s.st, s.c.Layout(), query, stage)
	if err != nil {
		return nil, false, err
	}
	o := s.rd
	o.Key = key
	if key == nil && m.Encrypted() != nil {
		if o.Key, err = s.c.ReaderKey(ctx, query, stage); err != nil {
			return nil, false, err
		}
	}
	st = reader.FromManifest(s.st, s.c.Layout(), m, o)
	if st.Schema() == nil {
		return nil, false, fmt.Errorf("%w: %s stage %d: its schema does not decode", manifest.ErrCorrupt, query, stage)
	}
	if m.Sealed {
		s.stages.put(k, st, gen)
	}
	return st, false, nil
}
