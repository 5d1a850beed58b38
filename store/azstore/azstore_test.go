package azstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/storetest"
)

func TestMain(m *testing.M) { testenv.AzuriteMain(m) }

// newStore is a store on a fresh container of Azurite's development
// account, counting its requests.
func newStore(t *testing.T) (*Store, *store.Counter) {
	t.Helper()
	ep := testenv.Azurite(t)
	c := &store.Counter{}
	st, err := New(t.Context(), Options{
		Container:   containerName(t),
		AccountName: ep.Account,
		AccountKey:  ep.Key,
		Endpoint:    ep.URL,
		Counter:     c,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(t.Context()); err != nil {
		t.Fatalf("EnsureBucket %s: %v", st.Container(), err)
	}
	// A second create finds it there: no error.
	if err := st.EnsureBucket(t.Context()); err != nil {
		t.Fatalf("EnsureBucket %s again: %v", st.Container(), err)
	}
	return st, c
}

// containerName is a valid container name (3-63 of a-z, 0-9 and single
// dashes) of the test's name and a random suffix.
func containerName(t *testing.T) string {
	name := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name[:min(len(name), 50)] + "-" + hex.EncodeToString(b[:])
}

func TestContract(t *testing.T) {
	st, _ := newStore(t)
	storetest.Run(t, st)
}

// TestContractThroughRetries runs the suite through the retry layer every
// client puts above its store: retries must not change an answer.
func TestContractThroughRetries(t *testing.T) {
	st, _ := newStore(t)
	counter := &store.Counter{}
	storetest.Run(t, retry.Wrap(st, retry.Policy{MaxAttempts: 4, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Timeout: time.Minute}, counter))
}

// TestConnectionString: a store built from a connection string reaches
// the same account as one built from its name and key.
func TestConnectionString(t *testing.T) {
	keyed, _ := newStore(t)
	ep := testenv.Azurite(t)
	st, err := New(t.Context(), Options{Container: keyed.Container(), ConnectionString: ep.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(t.Context(), "cs/obj", []byte("hello"), store.PutOptions{}); err != nil {
		t.Fatalf("Put through the connection string: %v", err)
	}
	if got := read(t, keyed, "cs/obj", 0, -1); string(got) != "hello" {
		t.Errorf("read back %q through the key, want hello", got)
	}
	if _, err := New(t.Context(), Options{Container: "c", ConnectionString: ep.ConnectionString(), Endpoint: ep.URL}); err == nil {
		t.Error("New with a connection string and an Endpoint: no error")
	}
	_, err = New(t.Context(), Options{Container: "c", AccountName: ep.Account, AccountKey: "not base64!", Endpoint: ep.URL})
	if err == nil || strings.Contains(err.Error(), "not base64!") {
		t.Errorf("New with a bad key = %v, want an error that does not quote the key", err)
	}
}

// TestRequestCounts: a multipart upload costs one Put Block per part and
// one Put Block List, and nothing to create; a whole object one Put Blob.
func TestRequestCounts(t *testing.T) {
	st, c := newStore(t)
	ctx := t.Context()
	const partSize, parts = 8 << 20, 3
	body := bytes.Repeat([]byte("durashuffle"), partSize/11+1)[:partSize]
	before := c.Requests()
	id, err := st.CreateMultipart(ctx, "counted")
	if err != nil {
		t.Fatal(err)
	}
	var done []store.Part
	for n := int32(1); n <= parts; n++ {
		pt, err := st.UploadPart(ctx, "counted", id, n, store.BytesBody(body))
		if err != nil {
			t.Fatalf("UploadPart %d: %v", n, err)
		}
		done = append(done, pt)
	}
	if err := st.CompleteMultipart(ctx, "counted", id, done); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "whole", body[:1000], store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got := reqs.Diff(c.Requests(), before)
	want := map[string]int64{"PutBlock": parts, "PutBlockList": 1, "PutBlob": 1}
	if len(got) != len(want) || got["PutBlock"] != want["PutBlock"] || got["PutBlockList"] != want["PutBlockList"] || got["PutBlob"] != want["PutBlob"] {
		t.Errorf("requests = %v, want %v", got, want)
	}
	if n := reqs.PutRequests(got); n != parts+2 {
		t.Errorf("PUT-class requests = %d, want %d", n, parts+2)
	}
	if rc := read(t, st, "counted", partSize*parts-3, -1); !bytes.Equal(rc, body[partSize-3:]) {
		t.Errorf("tail of the committed blob = %q, want %q", rc, body[partSize-3:])
	}
}

func read(t *testing.T, st store.Reader, key string, off, length int64) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rc, err := st.GetRange(ctx, key, off, length)
	if err != nil {
		t.Fatalf("GetRange(%s, %d, %d): %v", key, off, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

// wantStoreError checks err is a *store.Error of the status and code
// given, wrapping sentinel (when not nil), retryable or not.
func wantStoreError(t *testing.T, what string, err error, status int, code string, sentinel error, retryable bool) *store.Error {
	t.Helper()
	var se *store.Error
	if !errors.As(err, &se) {
		t.Fatalf("%s: error %T (%v) is not a *store.Error", what, err, err)
	}
	if se.Status != status || se.Code != code {
		t.Errorf("%s: status %d code %q, want %d %q (%v)", what, se.Status, se.Code, status, code, err)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Errorf("%s: %v does not wrap %v", what, err, sentinel)
	}
	if got := store.IsTransient(err); got != retryable {
		t.Errorf("%s: IsTransient = %v, want %v (%v)", what, got, retryable, err)
	}
	return se
}
