package uploader_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
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

// TestObjectOfItsOwn: an object of NewObject (a pool of its own) under
// one part is one Put; a larger one is
// parts of PartBytes, whatever the sizes of the writes, with its bytes,
// size and CRC32C as written; Discard after a failed part leaves no
// upload, and Discard with a Deleter removes a written object.
func TestObjectOfItsOwn(t *testing.T) {
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
			w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000, Inflight: 2})
			for b := data[:tc.size]; len(b) > 0; {
				n := min(len(b), 333)
				if err := w.Write(b[:n]); err != nil {
					t.Fatal(err)
				}
				b = b[n:]
			}
			res, err := w.Complete(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Discard(nil); err != nil { // after Complete: nothing
				t.Fatal(err)
			}
			got, ok := m.Bytes("k")
			if !ok || !bytes.Equal(got, data[:tc.size]) {
				t.Fatalf("stored %d bytes (present %v), want the %d written", len(got), ok, tc.size)
			}
			if w.Size() != int64(tc.size) || w.CRC32C() != store.CRC32C(data[:tc.size]) || res.Parts != tc.parts {
				t.Fatalf("size %d, crc %08x, parts %d; want %d, %08x, %d", w.Size(), w.CRC32C(), res.Parts, tc.size, store.CRC32C(data[:tc.size]), tc.parts)
			}
			if ups, _ := m.ListUploads(ctx, ""); len(ups) != 0 {
				t.Fatalf("uploads left: %v", ups)
			}
		})
	}
	t.Run("failed part", func(t *testing.T) {
		m := &failingParts{Mem: &store.Mem{}, n: 2}
		w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000})
		werr := w.Write(data)
		_, cerr := w.Complete(ctx)
		if werr == nil && cerr == nil {
			t.Fatal("no error from a part that failed")
		}
		_ = w.Discard(m) // the abort of a failed upload has run already
		if ups, _ := m.ListUploads(ctx, ""); len(ups) != 0 {
			t.Fatalf("uploads left after Discard: %v", ups)
		}
		if _, ok := m.Bytes("k"); ok {
			t.Fatal("an object exists after a failed part")
		}
	})
	t.Run("discard a written object", func(t *testing.T) {
		m := &store.Mem{}
		w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000})
		if err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Discard(m); err != nil {
			t.Fatal(err)
		}
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

// sent is how many parts were sent.
func (b *borrowingParts) sent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.bodies)
}

// TestObjectWriteFrom: WriteFrom stores the object as Write would, in
// parts that are slices of the caller's bytes (no copy), at most Inflight
// at once; an object of one part is one Put; a second write is refused.
func TestObjectWriteFrom(t *testing.T) {
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
			w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000, Inflight: 3})
			if err := w.WriteFrom(data[:tc.size]); err != nil {
				t.Fatal(err)
			}
			res, err := w.Complete(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := m.Bytes("k")
			if !ok || !bytes.Equal(got, data[:tc.size]) {
				t.Fatalf("stored %d bytes (present %v), want the %d written", len(got), ok, tc.size)
			}
			if w.Size() != int64(tc.size) || w.CRC32C() != store.CRC32C(data[:tc.size]) || res.Parts != tc.parts {
				t.Fatalf("size %d, crc %08x, parts %d; want %d, %08x, %d", w.Size(), w.CRC32C(), res.Parts, tc.size, store.CRC32C(data[:tc.size]), tc.parts)
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
		w := uploader.NewObject(ctx, &store.Mem{}, "k", uploader.ObjectOptions{PartBytes: 1000})
		if err := w.Write(data[:10]); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteFrom(data); err == nil {
			t.Fatal("WriteFrom after Write: no error")
		}
	})
	t.Run("failed part", func(t *testing.T) {
		m := &failingParts{Mem: &store.Mem{}, n: 2}
		w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000, Inflight: 4})
		werr := w.WriteFrom(data)
		_, cerr := w.Complete(ctx)
		if werr == nil && cerr == nil {
			t.Fatal("no error from a part that failed")
		}
		_ = w.Discard(m) // the abort of a failed upload has run already
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

// TestObjectWriteFile: WriteFile stores a file's bytes in parts of
// PartBytes sent as sections, with the parts' and the object's CRC32C;
// an object of one part is one part; a second write is refused; a part
// that fails leaves nothing after Discard.
func TestObjectWriteFile(t *testing.T) {
	ctx := context.Background()
	data := make([]byte, 10*1000+7)
	for i := range data {
		data[i] = byte(i * 31)
	}
	m := &store.Mem{}
	w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000, Inflight: 3})
	if err := w.WriteFile(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	res, err := w.Complete(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := m.Bytes("k")
	if !ok || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (present %v), want the %d of the file", len(got), ok, len(data))
	}
	if w.Size() != int64(len(data)) || w.CRC32C() != store.CRC32C(data) || res.Parts != 11 {
		t.Fatalf("size %d, crc %08x, parts %d; want %d, %08x, 11", w.Size(), w.CRC32C(), res.Parts, len(data), store.CRC32C(data))
	}
	one := uploader.NewObject(ctx, m, "one", uploader.ObjectOptions{PartBytes: 1000})
	if err := one.WriteFile(bytes.NewReader(data), 1000); err != nil {
		t.Fatal(err)
	}
	if res, err := one.Complete(ctx); err != nil || res.Parts != 1 || !bytes.Equal(stored(t, m, "one"), data[:1000]) {
		t.Fatalf("a file object of one part: %+v, %v; want one part of its bytes", res, err)
	}
	if err := one.WriteFile(bytes.NewReader(data), 1000); err == nil || !strings.Contains(err.Error(), "after 1000 bytes") {
		t.Fatalf("a second WriteFile: %v, want a refusal", err)
	}
	f := &failingSections{Mem: &store.Mem{}, n: 4}
	w = uploader.NewObject(ctx, f, "k", uploader.ObjectOptions{PartBytes: 1000, Inflight: 2})
	werr := w.WriteFile(bytes.NewReader(data), int64(len(data)))
	_, cerr := w.Complete(ctx)
	if werr == nil && cerr == nil {
		t.Fatal("no error from a section that failed")
	}
	_ = w.Discard(f)
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

// stored returns the bytes of key in m, failing t when it is missing.
func stored(t *testing.T, m *store.Mem, key string) []byte {
	t.Helper()
	b, ok := m.Bytes(key)
	if !ok {
		t.Fatalf("%s is not stored", key)
	}
	return b
}

// TestObjectInCalls: an object of a size hint written by WriteFrom or
// WriteFile in several calls, in order (whole parts, then the end),
// stores the bytes, parts and CRC32C of one call; a part under way is
// sent before the next call; a call of part of a part before the end,
// one past the hint, and one after the end are refused, naming the
// bytes and the limit.
func TestObjectInCalls(t *testing.T) {
	ctx := context.Background()
	data := make([]byte, 10*1000+7)
	for i := range data {
		data[i] = byte(i * 7)
	}
	size := int64(len(data))
	calls := [][2]int64{{0, 3000}, {3000, 0}, {3000, 1000}, {4000, size - 4000}}
	for _, verb := range []string{"WriteFrom", "WriteFile"} {
		t.Run(verb, func(t *testing.T) {
			m := &borrowingParts{Mem: &store.Mem{}}
			w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000, Inflight: 3, SizeHint: size})
			write := func(off, n int64) error {
				if verb == "WriteFrom" {
					return w.WriteFrom(data[off : off+n])
				}
				return w.WriteFile(bytes.NewReader(data), n)
			}
			for i, c := range calls {
				if err := write(c[0], c[1]); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if i == 0 && verb == "WriteFrom" {
					// The first call's parts go without waiting for the rest.
					deadline := time.Now().Add(10 * time.Second)
					for m.sent() < 3 && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					if got := m.sent(); got < 3 {
						t.Fatalf("%d parts sent after the first call of 3 whole parts, want 3", got)
					}
				}
			}
			res, err := w.Complete(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := stored(t, m.Mem, "k"); !bytes.Equal(got, data) || res.Parts != 11 || w.Size() != size || w.CRC32C() != store.CRC32C(data) {
				t.Fatalf("stored %d bytes in %d parts, size %d, crc %08x; want the %d written in 11 parts, crc %08x", len(got), res.Parts, w.Size(), w.CRC32C(), size, store.CRC32C(data))
			}
		})
	}
	t.Run("complete short", func(t *testing.T) {
		m := &store.Mem{}
		w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000, SizeHint: size})
		if err := w.WriteFrom(data[:2000]); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Complete(ctx); err == nil || !strings.Contains(err.Error(), "completed at 2000 bytes, short of its 10007") {
			t.Fatalf("Complete at 2000 of 10007 bytes: %v, want a refusal naming both", err)
		}
		_ = w.Discard(m)
		if ups, _ := m.ListUploads(ctx, ""); len(ups) != 0 {
			t.Fatalf("uploads left after Discard: %v", ups)
		}
		if _, ok := m.Bytes("k"); ok {
			t.Fatal("an object short of its size was stored")
		}
	})
	for _, tc := range []struct {
		name  string
		calls [][2]int64
		want  string
	}{
		{"part of a part", [][2]int64{{0, 1500}}, "not whole parts of 1000 bytes"},
		{"past the hint", [][2]int64{{0, 1000}, {1000, size}}, "passes the object's 10007 bytes"},
		{"after the end", [][2]int64{{0, size}, {0, 1000}}, "after the object ended, after 10007 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &store.Mem{}
			w := uploader.NewObject(ctx, m, "k", uploader.ObjectOptions{PartBytes: 1000, SizeHint: size})
			var err error
			for _, c := range tc.calls {
				b := make([]byte, c[1])
				if c[0]+c[1] <= size {
					b = data[c[0] : c[0]+c[1]]
				}
				if err = w.WriteFrom(b); err != nil {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a refusal saying %q", err, tc.want)
			}
			_, _ = w.Complete(ctx)
			_ = w.Discard(m)
			if ups, _ := m.ListUploads(ctx, ""); len(ups) != 0 {
				t.Fatalf("uploads left after Discard: %v", ups)
			}
		})
	}
}
