package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/store"
)

// mib: S3 part sizes are counted in MiB (5 MiB minimum but the last).
const mib = 1 << 20

// Run runs the contract suite against st, from a test of the caller's:
//
//	func TestMyStore(t *testing.T) { storetest.Run(t, newMyStore(t)) }
//
// Each case is a subtest under its own key prefix (store/storetest/...), and
// the cases run in parallel; st must be safe for concurrent use, as the
// client requires. The suite leaves no upload open; it deletes what it
// wrote as it goes, but a failed case may leave objects under store/storetest/
// (point st at a bucket, or a prefix, for tests). Run it on the store as
// the client will use it: durashuffle adds its retry layer above the
// store, so st itself should not retry.
func Run(t *testing.T, st store.Store) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s store.Store, pfx string)
	}{
		{"PutGet", testPutGet},
		{"EmptyObject", testEmptyObject},
		{"RangePastEnd", testRangePastEnd},
		{"MissingKey", testMissingKey},
		{"ConditionalPut", testConditionalPut},
		{"ConditionalPutRace", testConditionalPutRace},
		{"PutChecksum", testPutChecksum},
		{"Multipart", testMultipart},
		{"MultipartPartNumbers", testMultipartPartNumbers},
		{"CompleteRepeated", testCompleteRepeated},
		{"MultipartBadChecksum", testMultipartBadChecksum},
		{"ListUploadsAbort", testListUploadsAbort},
		{"List", testList},
		{"Delete", testDelete},
		{"ManyKeys", testManyKeys},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, st, prefix(t))
		})
	}
}

func testPutGet(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "obj"
	body := data(1*mib+17, 1)
	put(t, s, key, body, store.PutOptions{})

	for _, r := range []struct {
		name        string
		off, length int64
		want        []byte
	}{
		{"whole", 0, -1, body},
		{"exact length", 0, int64(len(body)), body},
		{"middle", 100, 1000, body[100:1100]},
		{"tail from offset", int64(len(body)) - 10, -1, body[len(body)-10:]},
		{"last byte", int64(len(body)) - 1, 1, body[len(body)-1:]},
		{"overlapping the end", int64(len(body)) - 5, 100, body[len(body)-5:]},
	} {
		if got := get(ctx, t, s, key, r.off, r.length); !bytes.Equal(got, r.want) {
			t.Errorf("GetRange(%d, %d) %s: got %d bytes, want %d (first diff at %d)",
				r.off, r.length, r.name, len(got), len(r.want), firstDiff(got, r.want))
		}
	}

	// Put is idempotent without IfNoneMatch: the second write replaces.
	body2 := data(1000, 2)
	put(t, s, key, body2, store.PutOptions{})
	if got := get(ctx, t, s, key, 0, -1); !bytes.Equal(got, body2) {
		t.Errorf("after overwrite: got %d bytes, want the %d new ones", len(got), len(body2))
	}
}

func testEmptyObject(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "empty"
	put(t, s, key, nil, store.PutOptions{})
	if got := get(ctx, t, s, key, 0, -1); len(got) != 0 {
		t.Errorf("empty object read back as %d bytes", len(got))
	}
	objs, _ := list(t, s, pfx, "")
	if want := []store.ObjectInfo{{Key: key, Size: 0}}; !sameObjects(objs, want) {
		t.Errorf("List = %v, want %v", objs, want)
	}
}

func testRangePastEnd(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "short"
	put(t, s, key, data(100, 3), store.PutOptions{})
	for _, r := range [][2]int64{{100, 10}, {100, -1}, {5000, 1}} {
		rc, err := s.GetRange(ctx, key, r[0], r[1])
		if err == nil {
			rc.Close()
		}
		wantErr(t, fmt.Sprintf("GetRange(%d, %d) of 100 bytes", r[0], r[1]), err, store.ErrInvalidRange, false)
	}
}

func testMissingKey(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "never-written"
	rc, err := s.GetRange(ctx, key, 0, -1)
	if err == nil {
		rc.Close()
	}
	wantErr(t, "GetRange of a missing key", err, store.ErrNotFound, false)
	if !store.IsNotFound(err) {
		t.Errorf("IsNotFound(%v) = false", err)
	}
	var se *store.Error
	if errors.As(err, &se) && se.Key != key {
		t.Errorf("error names key %q, want %q", se.Key, key)
	}
	rc, err = s.GetRange(ctx, key, 10, 10)
	if err == nil {
		rc.Close()
	}
	wantErr(t, "ranged GetRange of a missing key", err, store.ErrNotFound, false)
}

func testConditionalPut(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "manifest.json"
	first := []byte(`{"attempt":"a1"}`)
	if err := s.Put(ctx, key, first, store.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("first conditional put: %v", err)
	}
	err := s.Put(ctx, key, []byte(`{"attempt":"a2"}`), store.PutOptions{IfNoneMatch: true})
	wantErr(t, "second conditional put", err, store.ErrPreconditionFailed, false)
	if got := get(ctx, t, s, key, 0, -1); !bytes.Equal(got, first) {
		t.Errorf("after the losing put the object is %q, want the winner's %q", got, first)
	}
}

// testConditionalPutRace is the commit protocol: of attempts racing to
// write the same manifest, exactly one wins and its bytes are what stays.
func testConditionalPutRace(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "raced.json"
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.Put(ctx, key, fmt.Appendf(nil, `{"attempt":%d}`, i), store.PutOptions{IfNoneMatch: true})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("attempts %d and %d both committed", winner, i)
		case err == nil:
			winner = i
		default:
			wantErr(t, fmt.Sprintf("losing attempt %d", i), err, store.ErrPreconditionFailed, false)
		}
	}
	if winner < 0 {
		t.Fatal("no attempt committed")
	}
	if got, want := get(ctx, t, s, key, 0, -1), fmt.Appendf(nil, `{"attempt":%d}`, winner); !bytes.Equal(got, want) {
		t.Errorf("object is %q, want the winner's %q", got, want)
	}
}

func testPutChecksum(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "checked"
	body := data(300*1024, 4)
	sum := store.CRC32C(body)
	put(t, s, key, body, store.PutOptions{CRC32C: &sum})
	if got := get(ctx, t, s, key, 0, -1); !bytes.Equal(got, body) {
		t.Errorf("read back %d bytes, want %d", len(got), len(body))
	}

	bad := pfx + "corrupt"
	wrong := sum ^ 1
	err := s.Put(ctx, bad, body, store.PutOptions{CRC32C: &wrong})
	wantErr(t, "put with a wrong CRC32C", err, nil, false)
	rc, err := s.GetRange(ctx, bad, 0, -1)
	if err == nil {
		rc.Close()
	}
	wantErr(t, "object of the rejected put", err, store.ErrNotFound, false)

	// A wrong checksum must not clobber an object that exists either.
	err = s.Put(ctx, key, data(10, 5), store.PutOptions{CRC32C: &wrong})
	wantErr(t, "overwrite with a wrong CRC32C", err, nil, false)
	if got := get(ctx, t, s, key, 0, -1); !bytes.Equal(got, body) {
		t.Errorf("after a rejected overwrite the object is %d bytes, want the original %d", len(got), len(body))
	}
}

func testMultipart(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "data-0.arrows"
	sizes := []int{5 * mib, 5 * mib, 1024}
	var whole []byte
	bodies := make([][]byte, len(sizes))
	for i, n := range sizes {
		bodies[i] = data(n, byte(10+i))
		whole = append(whole, bodies[i]...)
	}
	id, err := s.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatalf("CreateMultipart: %v", err)
	}
	// Each part's bytes are held another way: in memory, in a file, and
	// the last streamed where the store streams parts. UploadPart is the
	// one verb for all of them.
	file := filepath.Join(t.TempDir(), "part-2")
	if err := os.WriteFile(file, bodies[1], 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	streams := store.StreamsParts(s)
	body := func(i int) store.Body {
		sum := store.CRC32C(bodies[i])
		switch {
		case i == 1:
			return store.FileBody(io.NewSectionReader(f, 0, int64(len(bodies[i])))).WithCRC32C(sum)
		case i == 2 && streams:
			return store.StreamBody(int64(len(bodies[i])), func() io.Reader { return bytes.NewReader(bodies[i]) })
		}
		return store.BytesBody(bodies[i]).WithCRC32C(sum)
	}
	parts := make([]store.Part, len(sizes))
	var g errgroup.Group
	for i := range bodies {
		g.Go(func() error {
			n := int32(i + 1)
			b := body(i)
			pt, err := s.UploadPart(ctx, key, id, n, b)
			if err != nil {
				return fmt.Errorf("UploadPart %d (%s): %w", n, b, err)
			}
			sum := store.CRC32C(bodies[i])
			switch {
			case pt.ETag == "":
				return fmt.Errorf("UploadPart %d (%s) returned no ETag", n, b)
			case pt.Number != n || pt.Size != int64(len(bodies[i])):
				return fmt.Errorf("UploadPart %d (%s) returned part %d of %d bytes, want %d of %d", n, b, pt.Number, pt.Size, n, len(bodies[i]))
			case pt.CRC32C == nil || *pt.CRC32C != sum:
				return fmt.Errorf("UploadPart %d (%s) returned CRC32C %v, want %08x", n, b, pt.CRC32C, sum)
			}
			parts[i] = pt
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// Re-uploading a part replaces it: what a retried part does.
	pt, err := s.UploadPart(ctx, key, id, 3, store.BytesBody(bodies[2]).WithCRC32C(*parts[2].CRC32C))
	if err != nil {
		t.Fatalf("re-upload part 3: %v", err)
	}
	parts[2] = pt

	if err := s.CompleteMultipart(ctx, key, id, parts); err != nil {
		t.Fatalf("CompleteMultipart: %v", err)
	}
	if got := get(ctx, t, s, key, 0, -1); !bytes.Equal(got, whole) {
		t.Fatalf("object is %d bytes, want %d (first diff at %d)", len(got), len(whole), firstDiff(got, whole))
	}
	// A range across the part boundary, as a reader of a frame split
	// between two chunks asks for it.
	off := int64(5*mib - 1000)
	if got := get(ctx, t, s, key, off, 2000); !bytes.Equal(got, whole[off:off+2000]) {
		t.Errorf("range across parts 1-2 differs at %d", firstDiff(got, whole[off:off+2000]))
	}
	off = int64(10*mib - 3)
	if got := get(ctx, t, s, key, off, -1); !bytes.Equal(got, whole[off:]) {
		t.Errorf("tail across parts 2-3 differs at %d", firstDiff(got, whole[off:]))
	}
	objs, _ := list(t, s, pfx, "")
	if want := []store.ObjectInfo{{Key: key, Size: int64(len(whole))}}; !sameObjects(objs, want) {
		t.Errorf("List = %v, want %v", objs, want)
	}
	if ups := uploads(t, s, pfx); len(ups) != 0 {
		t.Errorf("ListUploads after Complete = %v, want none", ups)
	}
}

// testMultipartPartNumbers: part numbers need not be consecutive (the
// object is its parts in number order, whatever order they were uploaded
// in), and a Complete that lists them out of ascending order is refused
// with a 400, leaving the upload to be completed as it should be.
func testMultipartPartNumbers(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "sparse.arrows"
	bodies := [][]byte{data(5*mib, 21), data(5*mib, 22), data(1000, 23)}
	numbers := []int32{2, 7, 10000}
	id, err := s.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatalf("CreateMultipart: %v", err)
	}
	parts := make([]store.Part, len(bodies))
	for i := len(bodies) - 1; i >= 0; i-- {
		pt, err := s.UploadPart(ctx, key, id, numbers[i], store.BytesBody(bodies[i]).WithCRC32C(store.CRC32C(bodies[i])))
		if err != nil {
			t.Fatalf("UploadPart %d: %v", numbers[i], err)
		}
		parts[i] = pt
	}
	swapped := []store.Part{parts[1], parts[0], parts[2]}
	err = s.CompleteMultipart(ctx, key, id, swapped)
	var se *store.Error
	if !errors.As(err, &se) || se.Status != 400 {
		t.Fatalf("CompleteMultipart with parts %d, %d, %d = %v, want a 400 (InvalidPartOrder)", numbers[1], numbers[0], numbers[2], err)
	}
	if err := s.CompleteMultipart(ctx, key, id, parts); err != nil {
		t.Fatalf("CompleteMultipart in order after the refused one: %v", err)
	}
	whole := slices.Concat(bodies...)
	if got := get(ctx, t, s, key, 0, -1); !bytes.Equal(got, whole) {
		t.Fatalf("object is %d bytes, want %d (first diff at %d)", len(got), len(whole), firstDiff(got, whole))
	}
	off := int64(10*mib - 10)
	if got := get(ctx, t, s, key, off, 20); !bytes.Equal(got, whole[off:off+20]) {
		t.Errorf("range across parts %d-%d differs at %d", numbers[1], numbers[2], firstDiff(got, whole[off:off+20]))
	}
	if ups := uploads(t, s, pfx); len(ups) != 0 {
		t.Errorf("ListUploads after Complete = %v, want none", ups)
	}
}

// testCompleteRepeated is a retried CompleteMultipartUpload whose first
// answer was lost: the second call must either succeed (MinIO, versitygw)
// or say the upload is gone (S3: 404 NoSuchUpload), never fail in a way
// that could be taken for a broken upload, and the object must stay whole.
// The uploader relies on it (uploader.Upload.Finish).
func testCompleteRepeated(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "completed-twice"
	body := data(5*mib+100, 15)
	id, err := s.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatalf("CreateMultipart: %v", err)
	}
	pt, err := s.UploadPart(ctx, key, id, 1, store.BytesBody(body).WithCRC32C(store.CRC32C(body)))
	if err != nil {
		t.Fatalf("UploadPart: %v", err)
	}
	parts := []store.Part{pt}
	if err := s.CompleteMultipart(ctx, key, id, parts); err != nil {
		t.Fatalf("CompleteMultipart: %v", err)
	}
	if err := s.CompleteMultipart(ctx, key, id, parts); err != nil {
		wantErr(t, "second CompleteMultipart", err, store.ErrNotFound, false)
	}
	if got := get(ctx, t, s, key, 0, -1); !bytes.Equal(got, body) {
		t.Errorf("after a repeated Complete the object is %d bytes, want %d (first diff at %d)", len(got), len(body), firstDiff(got, body))
	}
	if ups := uploads(t, s, pfx); len(ups) != 0 {
		t.Errorf("ListUploads after two Completes = %v, want none", ups)
	}
}

func testMultipartBadChecksum(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "bad-part"
	id, err := s.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatalf("CreateMultipart: %v", err)
	}
	t.Cleanup(func() { _ = s.AbortMultipart(context.Background(), key, id) })
	body := data(1024, 20)
	wrong := store.CRC32C(body) ^ 0xffff
	_, err = s.UploadPart(ctx, key, id, 1, store.BytesBody(body).WithCRC32C(wrong))
	wantErr(t, "UploadPart with a wrong CRC32C", err, nil, false)
	// The same from a file section: the store checks what it read.
	file := filepath.Join(t.TempDir(), "bad-part")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = s.UploadPart(ctx, key, id, 2, store.FileBody(io.NewSectionReader(f, 0, int64(len(body)))).WithCRC32C(wrong))
	wantErr(t, "UploadPart from a file section with a wrong CRC32C", err, nil, false)
}

func testListUploadsAbort(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	key := pfx + "open"
	id, err := s.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatalf("CreateMultipart: %v", err)
	}
	body := data(5*mib, 30)
	if _, err := s.UploadPart(ctx, key, id, 1, store.BytesBody(body).WithCRC32C(store.CRC32C(body))); err != nil {
		t.Fatalf("UploadPart: %v", err)
	}
	ups := uploads(t, s, pfx)
	if len(ups) != 1 || ups[0].Key != key || ups[0].UploadID != id {
		t.Fatalf("ListUploads = %v, want exactly {%s %s}", ups, key, id)
	}
	if ups[0].Initiated.IsZero() {
		t.Errorf("upload has no initiation time")
	}
	if other := uploads(t, s, pfx+"other/"); len(other) != 0 {
		t.Errorf("ListUploads of another prefix = %v, want none", other)
	}
	if err := s.AbortMultipart(ctx, key, id); err != nil {
		t.Fatalf("AbortMultipart: %v", err)
	}
	if ups := uploads(t, s, pfx); len(ups) != 0 {
		t.Errorf("ListUploads after Abort = %v, want none", ups)
	}
	// S3 answers a second abort with NoSuchUpload, MinIO with success;
	// both say the upload is gone, and callers must treat them alike.
	if err := s.AbortMultipart(ctx, key, id); err != nil {
		wantErr(t, "second AbortMultipart", err, store.ErrNotFound, false)
	}
	rc, err := s.GetRange(ctx, key, 0, -1)
	if err == nil {
		rc.Close()
	}
	wantErr(t, "object of an aborted upload", err, store.ErrNotFound, false)
}

func testList(t *testing.T, s store.Store, pfx string) {
	// "e-1" sorts before "e/1" ('-' < '/'), whatever a filesystem walk
	// would say.
	keys := []string{"a", "b/1", "b/2", "c/x/1", "e-1", "e/1", "f"}
	want := make([]store.ObjectInfo, len(keys))
	for i, k := range keys {
		body := data(10+i, byte(40+i))
		put(t, s, pfx+k, body, store.PutOptions{})
		want[i] = store.ObjectInfo{Key: pfx + k, Size: int64(len(body))}
	}
	pick := func(idx ...int) []store.ObjectInfo {
		var out []store.ObjectInfo
		for _, i := range idx {
			out = append(out, want[i])
		}
		return out
	}
	for _, c := range []struct {
		name, prefix, delim string
		objects             []store.ObjectInfo
		prefixes            []string
	}{
		{"flat", pfx, "", want, nil},
		{"top level", pfx, "/", pick(0, 4, 6), []string{pfx + "b/", pfx + "c/", pfx + "e/"}},
		{"one folder", pfx + "b/", "/", pick(1, 2), nil},
		{"folder prefix without slash", pfx + "c", "/", nil, []string{pfx + "c/"}},
		{"partial name", pfx + "e", "", pick(4, 5), nil},
		{"partial name with delimiter", pfx + "e", "/", pick(4), []string{pfx + "e/"}},
		{"nested flat", pfx + "c/", "", pick(3), nil},
		{"missing folder", pfx + "nope/", "/", nil, nil},
		{"missing prefix", pfx + "zzz", "", nil, nil},
	} {
		objs, prefixes := list(t, s, c.prefix, c.delim)
		if !sameObjects(objs, c.objects) {
			t.Errorf("%s: List(%q, %q) objects = %v, want %v", c.name, c.prefix, c.delim, objs, c.objects)
		}
		if !slices.Equal(prefixes, c.prefixes) {
			t.Errorf("%s: List(%q, %q) prefixes = %q, want %q", c.name, c.prefix, c.delim, prefixes, c.prefixes)
		}
	}
}

func testDelete(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	keys := []string{"a", "b/1", "b/2", "c"}
	for i, k := range keys {
		put(t, s, pfx+k, data(5, byte(50+i)), store.PutOptions{})
	}
	if err := s.Delete(ctx); err != nil {
		t.Errorf("Delete of no keys: %v", err)
	}
	if err := s.Delete(ctx, pfx+"a", pfx+"b/1", pfx+"b/2", pfx+"missing"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Delete(ctx, pfx+"a"); err != nil {
		t.Errorf("Delete of an already deleted key: %v", err)
	}
	objs, prefixes := list(t, s, pfx, "/")
	if want := []store.ObjectInfo{{Key: pfx + "c", Size: 5}}; !sameObjects(objs, want) || len(prefixes) != 0 {
		t.Errorf("List after Delete = %v %q, want %v and no prefixes", objs, prefixes, want)
	}
	objs, _ = list(t, s, pfx, "")
	if want := []store.ObjectInfo{{Key: pfx + "c", Size: 5}}; !sameObjects(objs, want) {
		t.Errorf("flat List after Delete = %v, want %v", objs, want)
	}
	for _, k := range keys[:3] {
		rc, err := s.GetRange(ctx, pfx+k, 0, -1)
		if err == nil {
			rc.Close()
		}
		wantErr(t, "GetRange of deleted "+k, err, store.ErrNotFound, false)
	}
}

// testManyKeys crosses the 1000-key page of ListObjectsV2 and the
// 1000-key batch of DeleteObjects.
func testManyKeys(t *testing.T, s store.Store, pfx string) {
	ctx := testContext(t)
	const n = 1005
	want := make([]store.ObjectInfo, n)
	keys := make([]string, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		keys[i] = fmt.Sprintf("%sk/%05d", pfx, i)
		want[i] = store.ObjectInfo{Key: keys[i], Size: 1}
		g.Go(func() error { return s.Put(gctx, keys[i], []byte{byte(i)}, store.PutOptions{}) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("put %d keys: %v", n, err)
	}
	objs, _ := list(t, s, pfx, "")
	if !sameObjects(objs, want) {
		t.Fatalf("List returned %d objects, want %d in order", len(objs), n)
	}
	_, prefixes := list(t, s, pfx, "/")
	if !slices.Equal(prefixes, []string{pfx + "k/"}) {
		t.Errorf("delimited List prefixes = %q, want [%sk/]", prefixes, pfx)
	}
	if err := s.Delete(ctx, keys...); err != nil {
		t.Fatalf("Delete %d keys: %v", n, err)
	}
	if objs, _ := list(t, s, pfx, ""); len(objs) != 0 {
		t.Errorf("after deleting all, List returned %d objects", len(objs))
	}
}

// helpers

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// prefix is a key prefix no other test (or run) uses, so the suite works in
// a shared bucket.
func prefix(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "store/storetest/" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + hex.EncodeToString(b[:]) + "/"
}

// data is n deterministic pseudo-random bytes: incompressible, and
// different per seed so a mixed-up part or object shows.
func data(n int, seed byte) []byte {
	b := make([]byte, n)
	_, _ = mrand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

func put(t *testing.T, s store.Store, key string, body []byte, opts store.PutOptions) {
	t.Helper()
	if err := s.Put(testContext(t), key, body, opts); err != nil {
		t.Fatalf("Put %s (%d bytes): %v", key, len(body), err)
	}
}

func get(ctx context.Context, t *testing.T, s store.Store, key string, off, length int64) []byte {
	t.Helper()
	rc, err := s.GetRange(ctx, key, off, length)
	if err != nil {
		t.Fatalf("GetRange(%s, %d, %d): %v", key, off, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read GetRange(%s, %d, %d): %v", key, off, length, err)
	}
	return b
}

func list(t *testing.T, s store.Store, prefix, delim string) ([]store.ObjectInfo, []string) {
	t.Helper()
	objs, prefixes, err := s.List(testContext(t), prefix, delim)
	if err != nil {
		t.Fatalf("List(%q, %q): %v", prefix, delim, err)
	}
	return objs, prefixes
}

func uploads(t *testing.T, s store.Store, prefix string) []store.UploadInfo {
	t.Helper()
	ups, err := s.ListUploads(testContext(t), prefix)
	if err != nil {
		t.Fatalf("ListUploads(%q): %v", prefix, err)
	}
	return ups
}

// sameObjects compares keys and sizes in order; modification times are
// the server's to choose, but must be set.
func sameObjects(got, want []store.ObjectInfo) bool {
	return slices.EqualFunc(got, want, func(g, w store.ObjectInfo) bool {
		return g.Key == w.Key && g.Size == w.Size && !g.LastModified.IsZero()
	})
}

// wantErr checks that err is a *store.Error of the class wanted: wrapping
// sentinel (if not nil) and retryable or not.
func wantErr(t *testing.T, what string, err, sentinel error, retryable bool) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, sentinel)
		return
	}
	var se *store.Error
	if !errors.As(err, &se) {
		t.Errorf("%s: error %T (%v) is not a *store.Error", what, err, err)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Errorf("%s: error %v does not wrap %v", what, err, sentinel)
	}
	if got := store.IsTransient(err); got != retryable {
		t.Errorf("%s: IsTransient = %v, want %v (%v)", what, got, retryable, err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
