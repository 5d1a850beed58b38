package gcsstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/gcsstore"
	"github.com/durashuffle/durashuffle/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testenv.StopFakeGCS(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// newStore returns a store on a fresh bucket of the fake-gcs-server this
// test binary runs, counting its requests.
func newStore(t *testing.T) (*gcsstore.Store, *store.Counter) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	counter := &store.Counter{}
	s, err := gcsstore.New(t.Context(), gcsstore.Options{
		Bucket:   "ds-" + hex.EncodeToString(b[:]),
		Endpoint: testenv.FakeGCS(t),
		Counter:  counter,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s.EnsureBucket(ctx); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	return s, counter
}

func TestContract(t *testing.T) {
	s, _ := newStore(t)
	storetest.Run(t, s)
}

// TestContractThroughRetries runs the suite through the retry layer every
// client puts above its store: retries must not change an answer.
func TestContractThroughRetries(t *testing.T) {
	s, _ := newStore(t)
	counter := &store.Counter{}
	storetest.Run(t, retry.Wrap(s, retry.Policy{MaxAttempts: 4, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Timeout: time.Minute}, counter))
}

// TestConditionalCreate: a second create of a key with IfNoneMatch is
// refused (GCS's ifGenerationMatch=0 answers 412), whoever sends it, and
// the first object stays.
func TestConditionalCreate(t *testing.T) {
	s, counter := newStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "stage/manifest", []byte("first"), store.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("first create: %v", err)
	}
	err := s.Put(ctx, "stage/manifest", []byte("second"), store.PutOptions{IfNoneMatch: true})
	var se *store.Error
	if !errors.Is(err, store.ErrPreconditionFailed) || !errors.As(err, &se) || se.Status != http.StatusPreconditionFailed || se.Retryable {
		t.Fatalf("second create = %v, want a non-retryable 412 store.Error wrapping ErrPreconditionFailed", err)
	}
	if got := read(t, s, "stage/manifest"); string(got) != "first" {
		t.Errorf("object = %q, want the first create's", got)
	}
	// Every request is counted under its JSON API method: the bucket's
	// look-up and create, two inserts (the second refused) and the read.
	want := map[store.OpStatus]int64{
		{Op: "buckets.get", Status: http.StatusNotFound}:              1,
		{Op: "buckets.insert", Status: http.StatusOK}:                 1,
		{Op: "objects.insert", Status: http.StatusOK}:                 1,
		{Op: "objects.insert", Status: http.StatusPreconditionFailed}: 1,
		{Op: "objects.get", Status: http.StatusOK}:                    1,
	}
	if got := counter.Statuses(); !maps.Equal(got, want) {
		t.Errorf("requests %v, want %v", got, want)
	}
}

// TestComposeTree completes an upload of 70 parts, more than one compose
// takes (32): two levels of composes, and the requests that costs.
func TestComposeTree(t *testing.T) {
	s, counter := newStore(t)
	ctx := t.Context()
	const n = 70
	key := "stage/data-0.arrows"
	id, err := s.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var whole []byte
	parts := make([]store.Part, n)
	for i := range n {
		b := bytes.Repeat([]byte{byte(i)}, 1000+i)
		whole = append(whole, b...)
		if parts[i], err = s.UploadPart(ctx, key, id, int32(i+1), store.BytesBody(b).WithCRC32C(store.CRC32C(b))); err != nil {
			t.Fatalf("UploadPart %d: %v", i+1, err)
		}
	}
	before := counter.Requests()
	if err := s.CompleteMultipart(ctx, key, id, parts); err != nil {
		t.Fatalf("CompleteMultipart of %d parts: %v", n, err)
	}
	ops := reqs.Diff(counter.Requests(), before)
	// 70 parts: 3 intermediate composes (32, 32, 6) and the final one;
	// then 70 parts and 3 intermediates deleted.
	if ops["objects.compose"] != 4 || ops["objects.delete"] != n+3 {
		t.Errorf("Complete of %d parts sent %v, want 4 objects.compose and %d objects.delete", n, ops, n+3)
	}
	if got := read(t, s, key); !bytes.Equal(got, whole) {
		t.Fatalf("composed object is %d bytes, want %d", len(got), len(whole))
	}
	if ups, err := s.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Errorf("ListUploads after Complete = %v, %v; want none", ups, err)
	}
	objs, prefixes, err := s.List(ctx, "", "")
	if err != nil || len(objs) != 1 || objs[0].Key != key || len(prefixes) != 0 {
		t.Errorf("List after Complete = %v %q %v, want only %s", objs, prefixes, err, key)
	}
}

// TestCompositeChecked: a Complete whose parts' CRC32Cs do not combine
// to the composite's is refused, not retryable, and leaves no object; the
// upload can then be completed with the right parts.
func TestCompositeChecked(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	key := "stage/checked"
	id, err := s.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	bodies := [][]byte{[]byte("first part"), []byte("second part")}
	parts := make([]store.Part, len(bodies))
	for i, b := range bodies {
		if parts[i], err = s.UploadPart(ctx, key, id, int32(i+1), store.BytesBody(b).WithCRC32C(store.CRC32C(b))); err != nil {
			t.Fatal(err)
		}
	}
	wrong := *parts[1].CRC32C ^ 1
	tampered := []store.Part{parts[0], parts[1]}
	tampered[1].CRC32C = &wrong
	err = s.CompleteMultipart(ctx, key, id, tampered)
	var se *store.Error
	if !errors.As(err, &se) || se.Retryable {
		t.Fatalf("Complete with a wrong part CRC32C = %v, want a non-retryable store.Error", err)
	}
	if rc, err := s.GetRange(ctx, key, 0, -1); !errors.Is(err, store.ErrNotFound) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("object of the refused Complete: GetRange = %v, want ErrNotFound", err)
	}
	if err := s.CompleteMultipart(ctx, key, id, parts); err != nil {
		t.Fatalf("Complete with the parts as uploaded: %v", err)
	}
	if got := read(t, s, key); string(got) != "first partsecond part" {
		t.Errorf("object = %q", got)
	}
}

// TestRequestsPerGiB counts the requests a GiB written as an upload of
// 8 MiB parts (128 parts) and of 64 MiB parts (16) costs, from uploads of
// as many small parts: the count depends on the parts, not their size.
func TestRequestsPerGiB(t *testing.T) {
	s, counter := newStore(t)
	ctx := t.Context()
	for _, c := range []struct {
		partMiB, parts             int
		inserts, composes, deletes int64
	}{
		{8, 128, 128, 5, 132},
		{64, 16, 16, 1, 16},
	} {
		before := counter.Requests()
		key := fmt.Sprintf("per-gib/%d", c.partMiB)
		id, err := s.CreateMultipart(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		parts := make([]store.Part, c.parts)
		for i := range parts {
			b := []byte{byte(i)}
			if parts[i], err = s.UploadPart(ctx, key, id, int32(i+1), store.BytesBody(b).WithCRC32C(store.CRC32C(b))); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CompleteMultipart(ctx, key, id, parts); err != nil {
			t.Fatal(err)
		}
		ops := reqs.Diff(counter.Requests(), before)
		t.Logf("1 GiB in %d MiB parts: %v; Class A (objects.insert + objects.compose) %d", c.partMiB, ops, reqs.PutRequests(ops))
		if ops["objects.insert"] != c.inserts || ops["objects.compose"] != c.composes || ops["objects.delete"] != c.deletes || len(ops) != 3 {
			t.Errorf("%d parts of %d MiB: requests %v, want %d objects.insert, %d objects.compose, %d objects.delete and nothing else",
				c.parts, c.partMiB, ops, c.inserts, c.composes, c.deletes)
		}
	}
}

// TestAbandonedUpload: the parts of a writer killed before Complete are
// listed by ListUploads (gc's question), never by List, and Abort
// removes every one of them.
func TestAbandonedUpload(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "stage/a/manifest", []byte("m"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	type upload struct{ key, id string }
	var open []upload
	for _, key := range []string{"stage/a/data-0.arrows", "stage/b/data-1.arrows", "other/data-2.arrows"} {
		id, err := s.CreateMultipart(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for n := int32(1); n <= 3; n++ {
			b := []byte(key)
			if _, err := s.UploadPart(ctx, key, id, n, store.BytesBody(b).WithCRC32C(store.CRC32C(b))); err != nil {
				t.Fatal(err)
			}
		}
		open = append(open, upload{key, id})
	}
	ups, err := s.ListUploads(ctx, "stage/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 2 || ups[0].Key != open[0].key || ups[0].UploadID != open[0].id || ups[1].Key != open[1].key || ups[1].UploadID != open[1].id {
		t.Fatalf("ListUploads(stage/) = %v, want the uploads of %s and %s", ups, open[0].key, open[1].key)
	}
	for _, u := range ups {
		if u.Initiated.IsZero() || time.Since(u.Initiated) > time.Hour {
			t.Errorf("upload %s initiated %v", u.Key, u.Initiated)
		}
	}
	if ups, _ := s.ListUploads(ctx, "stage/a/data"); len(ups) != 1 || ups[0].Key != open[0].key {
		t.Errorf("ListUploads(stage/a/data) = %v, want only %s", ups, open[0].key)
	}
	for _, c := range []struct{ prefix, delim string }{{"", ""}, {"", "/"}, {"stage/", ""}, {"stage/a/", "/"}, {".", "/"}} {
		objs, prefixes, err := s.List(ctx, c.prefix, c.delim)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.Key != "stage/a/manifest" {
				t.Errorf("List(%q, %q) shows %s", c.prefix, c.delim, o.Key)
			}
		}
		for _, p := range prefixes {
			if p != "stage/" && p != "stage/a/" && p != "other/" {
				t.Errorf("List(%q, %q) shows prefix %s", c.prefix, c.delim, p)
			}
		}
	}
	for _, u := range ups {
		if err := s.AbortMultipart(ctx, u.Key, u.UploadID); err != nil {
			t.Fatalf("AbortMultipart %s: %v", u.Key, err)
		}
	}
	if err := s.AbortMultipart(ctx, ups[0].Key, ups[0].UploadID); err != nil {
		t.Errorf("second AbortMultipart: %v, want nil", err)
	}
	if ups, _ := s.ListUploads(ctx, ""); len(ups) != 1 || ups[0].Key != open[2].key {
		t.Errorf("after aborting stage/'s uploads ListUploads = %v, want only %s's", ups, open[2].key)
	}
}

// TestThrottling: a service answering 429 or 503 gives retryable errors
// with throttling codes, which the retry layer counts as throttling and
// retries until the service answers.
func TestThrottling(t *testing.T) {
	for _, c := range []struct {
		status   int
		reason   string
		wantCode string
	}{
		{http.StatusTooManyRequests, "rateLimitExceeded", "rateLimitExceeded"},
		{http.StatusServiceUnavailable, "backendError", "ServiceUnavailable"},
		{http.StatusInternalServerError, "internalError", "internalError"},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			fails := 2
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if fails > 0 {
					fails--
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(c.status)
					fmt.Fprintf(w, `{"error":{"code":%d,"message":"slow down","errors":[{"domain":"global","reason":%q,"message":"slow down"}]}}`, c.status, c.reason)
					return
				}
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"kind":"storage#objects","items":[{"name":"k","size":"1","updated":"2026-01-02T03:04:05Z"}]}`)
			}))
			defer srv.Close()
			counter := &store.Counter{}
			s, err := gcsstore.New(t.Context(), gcsstore.Options{Bucket: "b", Endpoint: srv.URL, Counter: counter})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, _, err = s.List(t.Context(), "", "")
			var se *store.Error
			if !errors.As(err, &se) || se.Status != c.status || se.Code != c.wantCode || !se.Retryable {
				t.Fatalf("List against a %d = %#v, want a retryable store.Error with status %d and code %s", c.status, err, c.status, c.wantCode)
			}
			if got, want := retry.Throttling(retry.Reason(err)), c.status != http.StatusInternalServerError; got != want {
				t.Errorf("retry.Throttling(%q) = %v, want %v", retry.Reason(err), got, want)
			}
			retries := &store.Counter{}
			objs, _, err := retry.Wrap(s, retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond}, retries).List(t.Context(), "", "")
			if err != nil || len(objs) != 1 || objs[0].Key != "k" {
				t.Fatalf("List through retries = %v, %v; want the one object after a retry", objs, err)
			}
			if got := counter.Statuses()[store.OpStatus{Op: "objects.list", Status: c.status}]; got != 2 {
				t.Errorf("objects.list answered %d %d times, want 2 (%v)", c.status, got, counter.Statuses())
			}
			if got := retries.Retries()[store.OpReason{Op: "ListObjectsV2", Reason: c.wantCode}]; got != 1 {
				t.Errorf("retries %v, want one ListObjectsV2 retry for %s", retries.Retries(), c.wantCode)
			}
		})
	}
}

// TestBadChecksumKeepsObject: a put whose CRC32C does not match its bytes
// is refused by the service (400, not retryable) and leaves the object
// that was there.
func TestBadChecksumKeepsObject(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "k", []byte("good"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	wrong := store.CRC32C([]byte("bad")) ^ 1
	err := s.Put(ctx, "k", []byte("bad"), store.PutOptions{CRC32C: &wrong})
	var se *store.Error
	if !errors.As(err, &se) || se.Status != http.StatusBadRequest || se.Retryable {
		t.Fatalf("put with a wrong CRC32C = %v, want a non-retryable 400", err)
	}
	if got := read(t, s, "k"); string(got) != "good" {
		t.Errorf("object = %q after a refused put, want %q", got, "good")
	}
	if err := s.Put(ctx, ".durashuffle-parts/x", []byte("x"), store.PutOptions{}); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("put under the parts prefix = %v, want refused", err)
	}
}

func read(t *testing.T, s store.Reader, key string) []byte {
	t.Helper()
	rc, err := s.GetRange(t.Context(), key, 0, -1)
	if err != nil {
		t.Fatalf("GetRange %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newStoreVia is newStore with every request sent through rt, which
// wraps the default transport.
func newStoreVia(t *testing.T, rt func(next http.RoundTripper) http.RoundTripper) *gcsstore.Store {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	s, err := gcsstore.New(t.Context(), gcsstore.Options{
		Bucket:        "ds-" + hex.EncodeToString(b[:]),
		Endpoint:      testenv.FakeGCS(t),
		HTTPTransport: rt(http.DefaultTransport.(*http.Transport).Clone()),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.EnsureBucket(t.Context()); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	return s
}

// TestPartReplacedBeforeComplete sends part 1 twice, as a hedge or a
// retry after a lost answer does, and completes with the answer of the
// first: the second request landed last and replaced the generation the
// first answered. With every part's CRC32C the compose names the part
// objects without a generation (the service checks the combined CRC32C
// instead), so the Complete holds on a service that drops replaced
// generations; without CRC32Cs each part is composed at the generation
// its ETag names.
func TestPartReplacedBeforeComplete(t *testing.T) {
	var mu sync.Mutex
	var composes []string
	s := newStoreVia(t, func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/compose") && r.Body != nil {
				b, err := io.ReadAll(r.Body)
				if err != nil {
					return nil, err
				}
				r.Body = io.NopCloser(bytes.NewReader(b))
				mu.Lock()
				composes = append(composes, string(b))
				mu.Unlock()
			}
			return next.RoundTrip(r)
		})
	})
	ctx := t.Context()
	for _, withCRC := range []bool{true, false} {
		t.Run(fmt.Sprintf("crc32c=%v", withCRC), func(t *testing.T) {
			mu.Lock()
			composes = nil
			mu.Unlock()
			key := fmt.Sprintf("stage/replaced-%v", withCRC)
			id, err := s.CreateMultipart(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			bodies := [][]byte{bytes.Repeat([]byte("a"), 1000), []byte("second part")}
			body := func(b []byte) store.Body {
				if withCRC {
					return store.BytesBody(b).WithCRC32C(store.CRC32C(b))
				}
				return store.BytesBody(b)
			}
			parts := make([]store.Part, len(bodies))
			for i, b := range bodies {
				if parts[i], err = s.UploadPart(ctx, key, id, int32(i+1), body(b)); err != nil {
					t.Fatal(err)
				}
			}
			again, err := s.UploadPart(ctx, key, id, 1, body(bodies[0]))
			if err != nil {
				t.Fatal(err)
			}
			if again.ETag == parts[0].ETag {
				t.Fatalf("part 1 sent twice has one generation %s", again.ETag)
			}
			if err := s.CompleteMultipart(ctx, key, id, parts); err != nil {
				t.Fatalf("Complete with the first answer of part 1: %v", err)
			}
			if got, want := read(t, s, key), append(bytes.Clone(bodies[0]), bodies[1]...); !bytes.Equal(got, want) {
				t.Fatalf("object is %d bytes, want %d", len(got), len(want))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(composes) != 1 {
				t.Fatalf("%d compose requests, want 1", len(composes))
			}
			if pinned := strings.Contains(composes[0], `"generation"`); pinned != !withCRC {
				t.Errorf("compose request %s: generations named = %v, want %v", composes[0], pinned, !withCRC)
			}
		})
	}
}

// TestRangeFromZeroCapped reads a range from offset 0 through a proxy
// that drops the Range header, so the whole object comes back: the store
// hands out the bytes asked for and no more.
func TestRangeFromZeroCapped(t *testing.T) {
	s := newStoreVia(t, func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet {
				r = r.Clone(r.Context())
				r.Header.Del("Range")
			}
			return next.RoundTrip(r)
		})
	})
	ctx := t.Context()
	if err := s.Put(ctx, "whole", []byte("0123456789"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := s.GetRange(ctx, "whole", 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "0123" {
		t.Fatalf("GetRange(0, 4) through a proxy that drops Range = %q, want %q", got, "0123")
	}
}
