// Package memstore keeps committed workers' stored frame bytes in memory,
// so that readers in the same process, and peers over Flight, get them
// without a GET. The object store stays the truth: anything here may be
// evicted at any time, and a reader that misses falls back to it.
package memstore

import (
	"container/list"
	"fmt"
	"sync"
)

// Key names one committed worker attempt.
type Key struct {
	Query   string
	Stage   int
	Worker  string
	Attempt string
}

func (k Key) String() string {
	return fmt.Sprintf("%s stage %d worker %s attempt %s", k.Query, k.Stage, k.Worker, k.Attempt)
}

// Observer receives byte counts for metrics. Methods must be cheap and
// safe for concurrent use; a nil Observer is allowed.
type Observer interface {
	MemstoreBytes(n int64)    // bytes held or reserved now
	MemstoreAdmitted(n int64) // a worker's bytes admitted
	MemstoreDeclined(n int64) // bytes that did not fit
	MemstoreEvicted(n int64)  // bytes evicted to admit others
	MemstoreReleased(n int64) // bytes released by delete-query, gc or release
}

// Store is a byte budget and the workers held within it. Safe for
// concurrent use.
//
// The budget counts the capacity of every buffer held, plus reservations
// of writers still uploading. Admission evicts workers that were already
// read, least recently read first; a worker nobody has read yet is never
// evicted to admit another: a newcomer that does not fit then is
// declined, and its readers go to the object store.
type Store struct {
	max int64
	obs Observer

	mu       sync.Mutex
	used     int64 // held + reserved
	reserved int64
	byKey    map[Key]*list.Element
	read     *list.List // of *entry read at least once, most recent first
	unread   *list.List // of *entry never read, oldest admitted last
}

type entry struct {
	key     Key
	objects [][][]byte // objects[o][c]: chunk c of object o
	chunk   int64      // bytes per chunk (every chunk but an object's last)
	sizes   []int64    // stored size of each object
	bytes   int64      // capacity of every buffer held
	wasRead bool
}

// New returns a store of max bytes (max <= 0: nil, which holds nothing).
func New(max int64, obs Observer) *Store {
	if max <= 0 {
		return nil
	}
	s := &Store{max: max, obs: obs, byKey: map[Key]*list.Element{}, read: list.New(), unread: list.New()}
	return s
}

// Max returns the budget in bytes (0 for a nil store).
func (s *Store) Max() int64 {
	if s == nil {
		return 0
	}
	return s.max
}

// Reserve takes n bytes of the budget for a writer that keeps its chunks
// while they upload, evicting workers already read if need be. It returns
// false, taking nothing and counting n as declined, when n does not fit
// beside the unread workers and the other reservations.
func (s *Store) Reserve(n int64) bool {
	if s == nil || n <= 0 {
		return s != nil
	}
	s.mu.Lock()
	var evicted int64
	for s.used+n > s.max && s.read.Len() > 0 {
		evicted += s.removeLocked(s.read.Back())
	}
	ok := s.used+n <= s.max
	if ok {
		s.used += n
		s.reserved += n
	}
	used := s.used
	s.mu.Unlock()
	if s.obs != nil {
		if evicted > 0 {
			s.obs.MemstoreEvicted(evicted)
		}
		if !ok {
			s.obs.MemstoreDeclined(n)
		}
		s.obs.MemstoreBytes(used)
	}
	return ok
}

// Unreserve returns n reserved bytes (a writer that failed, was aborted
// or stopped keeping its chunks). declined says the bytes did not fit
// (they are counted as declined).
func (s *Store) Unreserve(n int64, declined bool) {
	if s == nil || n <= 0 {
		return
	}
	s.mu.Lock()
	s.used -= n
	s.reserved -= n
	used := s.used
	s.mu.Unlock()
	if s.obs != nil {
		s.obs.MemstoreBytes(used)
		if declined {
			s.obs.MemstoreDeclined(n)
		}
	}
}

// Declined counts bytes of a worker that could not be kept, without any
// reservation (for metrics).
func (s *Store) Declined(n int64) {
	if s != nil && s.obs != nil && n > 0 {
		s.obs.MemstoreDeclined(n)
	}
}

// Admit turns reserved bytes into a held worker: objects[o] are object
// o's chunks in order (each of chunkSize bytes but the last; never
// modified afterwards), sizes[o] its stored size. reserved must be what
// the writer reserved for them (the capacity of every buffer). A worker
// already held is replaced.
func (s *Store) Admit(k Key, objects [][][]byte, chunkSize int64, sizes []int64, reserved int64) {
	if s == nil {
		return
	}
	e := &entry{key: k, objects: objects, chunk: chunkSize, sizes: sizes, bytes: reserved}
	s.mu.Lock()
	var replaced int64
	if old, ok := s.byKey[k]; ok {
		replaced = s.removeLocked(old)
	}
	s.reserved -= reserved
	s.byKey[k] = s.unread.PushFront(e)
	used := s.used
	s.mu.Unlock()
	if s.obs != nil {
		if replaced > 0 {
			s.obs.MemstoreReleased(replaced)
		}
		s.obs.MemstoreAdmitted(reserved)
		s.obs.MemstoreBytes(used)
	}
}

// ErrMiss is returned by Read for bytes the store does not hold.
var ErrMiss = fmt.Errorf("not held in memory")

// Read returns bytes [off, off+n) of object obj of worker k: a slice of
// the held chunk when the range lies in one chunk (no copy; the caller
// must not modify it), else a copy. It fails with an error wrapping
// ErrMiss when the worker, the object or the range is not held. A worker
// read moves to the front of the eviction order of read workers.
func (s *Store) Read(k Key, obj int, off, n int64) ([]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("%s: %w (no memory store)", k, ErrMiss)
	}
	s.mu.Lock()
	el, ok := s.byKey[k]
	if !ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", k, ErrMiss)
	}
	e := el.Value.(*entry)
	if !e.wasRead {
		e.wasRead = true
		s.unread.Remove(el)
		el = s.read.PushFront(e)
		s.byKey[k] = el
	} else {
		s.read.MoveToFront(el)
	}
	s.mu.Unlock()
	if obj < 0 || obj >= len(e.objects) || off < 0 || n < 0 || off > e.sizes[obj] || n > e.sizes[obj]-off {
		return nil, fmt.Errorf("%s: bytes [%d, %d) of object %d: %w (the worker has %d objects)", k, off, off+n, obj, ErrMiss, len(e.objects))
	}
	chunks := e.objects[obj]
	first, last := off/e.chunk, (off+n-1)/e.chunk
	if n == 0 {
		return []byte{}, nil
	}
	if first == last {
		c := chunks[first]
		lo := off - first*e.chunk
		return c[lo : lo+n : lo+n], nil
	}
	out := make([]byte, 0, n)
	for ci := first; ci <= last; ci++ {
		c := chunks[ci]
		lo, hi := int64(0), int64(len(c))
		if ci == first {
			lo = off - ci*e.chunk
		}
		if ci == last {
			hi = off + n - ci*e.chunk
		}
		out = append(out, c[lo:hi]...)
	}
	return out, nil
}

// Release drops every worker of the query's stage (stage < 0: of every
// stage of the query) and returns the bytes released.
func (s *Store) Release(query string, stage int) (workers int, bytes int64) {
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	for k, el := range s.byKey {
		if k.Query == query && (stage < 0 || k.Stage == stage) {
			bytes += s.removeLocked(el)
			workers++
		}
	}
	used := s.used
	s.mu.Unlock()
	if s.obs != nil {
		if bytes > 0 {
			s.obs.MemstoreReleased(bytes)
		}
		s.obs.MemstoreBytes(used)
	}
	return workers, bytes
}

// Held is one worker held in memory.
type Held struct {
	Key   Key
	Bytes int64
	Read  bool
}

// Holdings lists the workers held of the query's stage (stage < 0: every
// stage; query "": every query).
func (s *Store) Holdings(query string, stage int) []Held {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Held
	for k, el := range s.byKey {
		if (query == "" || k.Query == query) && (stage < 0 || k.Stage == stage) {
			e := el.Value.(*entry)
			out = append(out, Held{Key: k, Bytes: e.bytes, Read: e.wasRead})
		}
	}
	return out
}

// Used returns the bytes held and reserved.
func (s *Store) Used() (held, reserved int64) {
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used - s.reserved, s.reserved
}

// removeLocked drops an entry and returns its bytes.
func (s *Store) removeLocked(el *list.Element) int64 {
	e := el.Value.(*entry)
	if e.wasRead {
		s.read.Remove(el)
	} else {
		s.unread.Remove(el)
	}
	delete(s.byKey, e.key)
	s.used -= e.bytes
	return e.bytes
}
