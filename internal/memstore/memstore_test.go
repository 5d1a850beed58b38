package memstore

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
)

type counts struct{ bytes, admitted, declined, evicted, released atomic.Int64 }

func (c *counts) MemstoreBytes(n int64)    { c.bytes.Store(n) }
func (c *counts) MemstoreAdmitted(n int64) { c.admitted.Add(n) }
func (c *counts) MemstoreDeclined(n int64) { c.declined.Add(n) }
func (c *counts) MemstoreEvicted(n int64)  { c.evicted.Add(n) }
func (c *counts) MemstoreReleased(n int64) { c.released.Add(n) }

// admit reserves and admits one object of the given chunks.
func admit(t *testing.T, s *Store, k Key, chunk int64, chunks ...[]byte) bool {
	t.Helper()
	var n, size int64
	for _, c := range chunks {
		n += int64(cap(c))
		size += int64(len(c))
	}
	if !s.Reserve(n) {
		return false
	}
	s.Admit(k, [][][]byte{chunks}, chunk, []int64{size}, n)
	return true
}

func TestReadAcrossChunks(t *testing.T) {
	s := New(1<<20, nil)
	obj := bytes.Repeat([]byte("0123456789"), 10) // 100 bytes in chunks of 32
	k := Key{"q", 1, "w", "a"}
	if !admit(t, s, k, 32, obj[0:32:32], obj[32:64:64], obj[64:96:96], append([]byte(nil), obj[96:]...)) {
		t.Fatal("reserve failed")
	}
	for _, c := range []struct{ off, n int64 }{{0, 100}, {5, 10}, {30, 40}, {64, 36}, {99, 1}, {0, 0}} {
		got, err := s.Read(k, 0, c.off, c.n)
		if err != nil || !bytes.Equal(got, obj[c.off:c.off+c.n]) {
			t.Errorf("read [%d, %d): %q, %v", c.off, c.off+c.n, got, err)
		}
	}
	for _, c := range []struct {
		k        Key
		obj      int
		off, len int64
	}{{Key{"q", 1, "w", "b"}, 0, 0, 1}, {k, 1, 0, 1}, {k, 0, 90, 11}, {k, 0, -1, 2}} {
		if _, err := s.Read(c.k, c.obj, c.off, c.len); !errors.Is(err, ErrMiss) {
			t.Errorf("read %v object %d [%d, +%d): %v, want ErrMiss", c.k, c.obj, c.off, c.len, err)
		}
	}
}

func TestAdmissionPrefersUnread(t *testing.T) {
	c := &counts{}
	s := New(100, c)
	buf := func() []byte { return make([]byte, 40) }
	a, b, d := Key{"q", 0, "a", "1"}, Key{"q", 0, "b", "1"}, Key{"q", 0, "d", "1"}
	if !admit(t, s, a, 40, buf()) || !admit(t, s, b, 40, buf()) {
		t.Fatal("two workers of 40 bytes do not fit in 100")
	}
	// Both unread: a third is declined, nothing evicted.
	if admit(t, s, d, 40, buf()) {
		t.Fatal("admitted a third worker while both held ones are unread")
	}
	if c.declined.Load() != 40 || c.evicted.Load() != 0 {
		t.Fatalf("declined %d, evicted %d", c.declined.Load(), c.evicted.Load())
	}
	// Once a is read, it makes room.
	if _, err := s.Read(a, 0, 0, 1); err != nil {
		t.Fatal(err)
	}
	if !admit(t, s, d, 40, buf()) {
		t.Fatal("a read worker was not evicted for a new one")
	}
	if _, err := s.Read(a, 0, 0, 1); !errors.Is(err, ErrMiss) {
		t.Fatalf("a still held: %v", err)
	}
	if c.evicted.Load() != 40 || c.bytes.Load() != 80 || c.admitted.Load() != 120 {
		t.Fatalf("evicted %d, bytes %d, admitted %d", c.evicted.Load(), c.bytes.Load(), c.admitted.Load())
	}
	if n, bytes := s.Release("q", 0); n != 2 || bytes != 80 || c.released.Load() != 80 || c.bytes.Load() != 0 {
		t.Fatalf("release: %d workers, %d bytes; released %d, held %d", n, bytes, c.released.Load(), c.bytes.Load())
	}
	if held, reserved := s.Used(); held != 0 || reserved != 0 {
		t.Fatalf("after release: held %d, reserved %d", held, reserved)
	}
}

func TestNilStoreHoldsNothing(t *testing.T) {
	var s *Store = New(0, nil)
	if s.Reserve(1) || s.Max() != 0 || len(s.Holdings("", -1)) != 0 {
		t.Fatal("a store of 0 bytes reserved or holds something")
	}
	if _, err := s.Read(Key{}, 0, 0, 1); !errors.Is(err, ErrMiss) {
		t.Fatal(err)
	}
}
