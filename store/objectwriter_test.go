package store_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// failingParts fails every UploadPart after the first n.
type failingParts struct {
	*store.Mem
	n int
}

func (f *failingParts) UploadPart(ctx context.Context, key, uploadID string, n int32, body store.Body) (store.Part, error) {
	if int(n) > f.n {
		return store.Part{}, errors.New("injected part failure")
	}
	return f.Mem.UploadPart(ctx, key, uploadID, n, body)
}

// TestObjectWriter: an object under one part is one Put; a larger one is
// parts of PartBytes, whatever the sizes of the writes, with its bytes,
// size and CRC32C as written; Discard after a failed part leaves no
// upload, and Discard with a Deleter removes a written object.
func TestObjectWriter(t *testing.T) {
	ctx := context.Background()
	data := make([]byte, 5*1000+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name  string
		size  int
		parts int
	}{
		{"one put", 999, 1},
		{"exactly one part", 1000, 1},
		{"parts and a tail", len(data), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &store.Mem{}
			w := store.NewObjectWriter(ctx, m, "k", store.ObjectWriterOptions{PartBytes: 1000, Inflight: 2})
			for b := data[:tc.size]; len(b) > 0; {
				n := min(len(b), 333)
				if _, err := w.Write(b[:n]); err != nil {
					t.Fatal(err)
				}
				b = b[n:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w.Discard(nil) // after Close: nothing
			got, ok := m.Bytes("k")
			if !ok || !bytes.Equal(got, data[:tc.size]) {
				t.Fatalf("stored %d bytes (present %v), want the %d written", len(got), ok, tc.size)
			}
			if w.Size() != int64(tc.size) || w.CRC32C() != store.CRC32C(data[:tc.size]) || w.Parts() != tc.parts {
				t.Fatalf("size %d, crc %08x, parts %d; want %d, %08x, %d", w.Size(), w.CRC32C(), w.Parts(), tc.size, store.CRC32C(data[:tc.size]), tc.parts)
			}
			if ups, _ := m.ListUploads(ctx, ""); len(ups) != 0 {
				t.Fatalf("uploads left: %v", ups)
			}
		})
	}
	t.Run("failed part", func(t *testing.T) {
		m := &failingParts{Mem: &store.Mem{}, n: 2}
		w := store.NewObjectWriter(ctx, m, "k", store.ObjectWriterOptions{PartBytes: 1000})
		_, werr := w.Write(data)
		cerr := w.Close()
		if werr == nil && cerr == nil {
			t.Fatal("no error from a part that failed")
		}
		w.Discard(m)
		if ups, _ := m.ListUploads(ctx, ""); len(ups) != 0 {
			t.Fatalf("uploads left after Discard: %v", ups)
		}
		if _, ok := m.Bytes("k"); ok {
			t.Fatal("an object exists after a failed part")
		}
	})
	t.Run("discard a written object", func(t *testing.T) {
		m := &store.Mem{}
		w := store.NewObjectWriter(ctx, m, "k", store.ObjectWriterOptions{PartBytes: 1000})
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		w.Discard(m)
		if _, ok := m.Bytes("k"); ok {
			t.Fatal("the object is still there after Discard with a Deleter")
		}
	})
}

// borrowingParts records UploadPart's bodies and how many ran at once.
type borrowingParts struct {
	*store.Mem
	mu           sync.Mutex
	bodies       [][]byte
	now, maxSeen int
}

func (b *borrowingParts) UploadPart(ctx context.Context, key, uploadID string, n int32, body store.Body) (store.Part, error) {
	buf, _ := body.Bytes()
	b.mu.Lock()
	b.bodies = append(b.bodies, buf)
	b.now++
	b.maxSeen = max(b.maxSeen, b.now)
	b.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // let the others pile up, if they may
	defer func() { b.mu.Lock(); b.now--; b.mu.Unlock() }()
	return b.Mem.UploadPart(ctx, key, uploadID, n, body)
}

// TestObjectWriterFrom: WriteFrom stores the object as Write would, in
// parts that are slices of the caller's bytes (no copy), at most Inflight
// at once; an object of one part is one Put; a second write is refused.
func TestObjectWriterFrom(t *testing.T) {
	ctx := context.Background()
	data := make([]byte, 10*1000+7)
	for i := range data {
		data[i] = byte(i * 13)
	}
	for _, tc := range []struct {
		name  string
		size  int
		parts int
	}{
		{"empty", 0, 1},
		{"one put", 1000, 1},
		{"eleven parts", len(data), 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &borrowingParts{Mem: &store.Mem{}}
			w := store.NewObjectWriter(ctx, m, "k", store.ObjectWriterOptions{PartBytes: 1000, Inflight: 3})
			if err := w.WriteFrom(data[:tc.size]); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			got, ok := m.Bytes("k")
			if !ok || !bytes.Equal(got, data[:tc.size]) {
				t.Fatalf("stored %d bytes (present %v), want the %d written", len(got), ok, tc.size)
			}
			if w.Size() != int64(tc.size) || w.CRC32C() != store.CRC32C(data[:tc.size]) || w.Parts() != tc.parts {
				t.Fatalf("size %d, crc %08x, parts %d; want %d, %08x, %d", w.Size(), w.CRC32C(), w.Parts(), tc.size, store.CRC32C(data[:tc.size]), tc.parts)
			}
			if tc.parts > 1 {
				if len(m.bodies) != tc.parts || m.maxSeen > 3 || m.maxSeen < 2 {
					t.Fatalf("%d parts sent, at most %d at once; want %d, 2 to 3 at once", len(m.bodies), m.maxSeen, tc.parts)
				}
				for _, b := range m.bodies {
					if !within(data, b) {
						t.Fatalf("a part of %d bytes is a copy, not a slice of the object's bytes", len(b))
					}
				}
			}
		})
	}
	t.Run("after Write", func(t *testing.T) {
		w := store.NewObjectWriter(ctx, &store.Mem{}, "k", store.ObjectWriterOptions{PartBytes: 1000})
		if _, err := w.Write(data[:10]); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteFrom(data); err == nil {
			t.Fatal("WriteFrom after Write: no error")
		}
	})
	t.Run("failed part", func(t *testing.T) {
		m := &failingParts{Mem: &store.Mem{}, n: 2}
		w := store.NewObjectWriter(ctx, m, "k", store.ObjectWriterOptions{PartBytes: 1000, Inflight: 4})
		werr := w.WriteFrom(data)
		cerr := w.Close()
		if werr == nil && cerr == nil {
			t.Fatal("no error from a part that failed")
		}
		w.Discard(m)
		if ups, _ := m.ListUploads(ctx, ""); len(ups) != 0 {
			t.Fatalf("uploads left after Discard: %v", ups)
		}
		if _, ok := m.Bytes("k"); ok {
			t.Fatal("an object exists after a failed part")
		}
	})
}

// within says whether b's first byte is one of data's (not a copy).
func within(data, b []byte) bool {
	for i := range data {
		if &data[i] == &b[0] {
			return true
		}
	}
	return false
}

// TestObjectWriterFromFile: WriteFromFile stores a file's bytes in parts
// of PartBytes sent as sections, with the parts' and the object's
// CRC32C; an object of one part, or a second write, is refused; a part
// that fails leaves nothing after Discard.
func TestObjectWriterFromFile(t *testing.T) {
	ctx := context.Background()
	data := make([]byte, 10*1000+7)
	for i := range data {
		data[i] = byte(i * 31)
	}
	m := &store.Mem{}
	w := store.NewObjectWriter(ctx, m, "k", store.ObjectWriterOptions{PartBytes: 1000, Inflight: 3})
	if err := w.WriteFromFile(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, ok := m.Bytes("k")
	if !ok || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (present %v), want the %d of the file", len(got), ok, len(data))
	}
	if w.Size() != int64(len(data)) || w.CRC32C() != store.CRC32C(data) || w.Parts() != 11 {
		t.Fatalf("size %d, crc %08x, parts %d; want %d, %08x, 11", w.Size(), w.CRC32C(), w.Parts(), len(data), store.CRC32C(data))
	}
	one := store.NewObjectWriter(ctx, m, "one", store.ObjectWriterOptions{PartBytes: 1000})
	if err := one.WriteFromFile(bytes.NewReader(data), 1000); err == nil || !strings.Contains(err.Error(), "at least two") {
		t.Fatalf("a file object of one part: %v, want a refusal", err)
	}
	f := &failingSections{Mem: &store.Mem{}, n: 4}
	w = store.NewObjectWriter(ctx, f, "k", store.ObjectWriterOptions{PartBytes: 1000, Inflight: 2})
	werr := w.WriteFromFile(bytes.NewReader(data), int64(len(data)))
	cerr := w.Close()
	if werr == nil && cerr == nil {
		t.Fatal("no error from a section that failed")
	}
	w.Discard(f)
	if ups, _ := f.ListUploads(ctx, ""); len(ups) != 0 {
		t.Fatalf("uploads left after Discard: %v", ups)
	}
	if _, ok := f.Bytes("k"); ok {
		t.Fatal("an object exists after a failed section")
	}
}

// failingSections fails every part from a file section after the first n.
type failingSections struct {
	*store.Mem
	n int
}

func (f *failingSections) UploadPart(ctx context.Context, key, uploadID string, n int32, body store.Body) (store.Part, error) {
	if int(n) > f.n {
		return store.Part{}, errors.New("injected section failure")
	}
	return f.Mem.UploadPart(ctx, key, uploadID, n, body)
}
