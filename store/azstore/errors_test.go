package azstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

func nopCloser(b []byte) io.ReadSeekCloser { return streaming.NopCloser(bytes.NewReader(b)) }

// TestErrors: Azurite's answers come out of the store classified, with
// Azure's status and code, and without the account key.
func TestErrors(t *testing.T) {
	st, _ := newStore(t)
	ctx := t.Context()
	if err := st.Put(ctx, "short", make([]byte, 100), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	_, err := st.GetRange(ctx, "missing", 0, -1)
	se := wantStoreError(t, "GetRange of a missing key", err, 404, "BlobNotFound", store.ErrNotFound, false)
	if se.Op != "GetBlob" || se.Key != "missing" {
		t.Errorf("error names %s %s, want GetBlob missing", se.Op, se.Key)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || strings.Contains(msg, testenv.AzuriteKey) {
		t.Errorf("error message spans lines or holds the key: %q", msg)
	}

	_, err = st.GetRange(ctx, "short", 100, 10)
	wantStoreError(t, "GetRange past the end", err, 416, "InvalidRange", store.ErrInvalidRange, false)

	// A block list naming a block never staged.
	id, _ := st.CreateMultipart(ctx, "broken")
	err = st.CompleteMultipart(ctx, "broken", id, []store.Part{{Number: 1, ETag: blockID(id, 1)}})
	wantStoreError(t, "Put Block List of an unstaged block", err, 400, "InvalidBlockList", store.ErrPartRejected, false)

	// Bytes that do not match their MD5: the service checks them.
	_, err = st.blob("md5").StageBlock(ctx, blockID(id, 1), nopCloser([]byte("abc")), &blockblob.StageBlockOptions{
		TransactionalValidation: blob.TransferValidationTypeMD5(bytes.Repeat([]byte{1}, 16)),
	})
	wantStoreError(t, "Put Block with a wrong MD5", classify("PutBlock", "md5", err), 400, "Md5Mismatch", nil, false)

	// A container that does not exist is no missing key: a reader must
	// not conclude the stage is absent.
	ep := testenv.Azurite(t)
	other, err := New(ctx, Options{Container: containerName(t) + "-none", AccountName: ep.Account, AccountKey: ep.Key, Endpoint: ep.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.GetRange(ctx, "k", 0, -1)
	if se := wantStoreError(t, "GetRange in a missing container", err, 404, "ContainerNotFound", nil, false); errors.Is(se, store.ErrNotFound) {
		t.Errorf("a missing container reads as a missing key: %v", err)
	}

	// A wrong key: refused, not retried.
	bad, err := New(ctx, Options{Container: st.Container(), AccountName: ep.Account, AccountKey: "AAAA" + ep.Key[4:], Endpoint: ep.URL})
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Put(ctx, "k", []byte("x"), store.PutOptions{})
	wantStoreError(t, "Put with a wrong key", err, 403, "AuthorizationFailure", nil, false)

	// Nothing listening: no response, retryable.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down, err := New(ctx, Options{Container: "c", AccountName: ep.Account, AccountKey: ep.Key, Endpoint: "http://" + addr + "/" + ep.Account})
	if err != nil {
		t.Fatal(err)
	}
	err = down.Put(ctx, "k", []byte("x"), store.PutOptions{})
	wantStoreError(t, "Put to a closed port", err, 0, "", nil, true)
}

// throttlingServer answers every request with status and Azure's error
// code, as the service does when an account is over its targets.
func throttlingServer(t *testing.T, status int, code string) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("x-ms-error-code", code)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>`+code+`</Code><Message>The server is busy.
RequestId:0</Message></Error>`)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// TestThrottling: 503 ServerBusy and 500 OperationTimedOut are retryable
// store errors that the retry layer counts as throttling; the SDK itself
// sends each request once.
func TestThrottling(t *testing.T) {
	for _, c := range []struct {
		status int
		code   string
	}{{503, "ServerBusy"}, {500, "OperationTimedOut"}} {
		t.Run(c.code, func(t *testing.T) {
			srv, hits := throttlingServer(t, c.status, c.code)
			requests := &store.Counter{}
			st, err := New(t.Context(), Options{Container: "c", AccountName: testenv.AzuriteAccount, AccountKey: testenv.AzuriteKey,
				Endpoint: srv.URL + "/" + testenv.AzuriteAccount, Counter: requests})
			if err != nil {
				t.Fatal(err)
			}
			err = st.Put(t.Context(), "k", []byte("x"), store.PutOptions{})
			wantStoreError(t, "Put", err, c.status, c.code, nil, true)
			if n := hits.Load(); n != 1 {
				t.Errorf("the SDK sent %d requests for one Put, want 1 (its retries are off)", n)
			}
			if !strings.Contains(err.Error(), "The server is busy.") {
				t.Errorf("error %q does not carry the service's message", err)
			}

			retries := &store.Counter{}
			var throttled atomic.Int64
			r := retry.Wrap(st, retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond,
				OnRetry: func(op, reason string) {
					if retry.Throttling(reason) {
						throttled.Add(1)
					}
				}}, retries)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err = r.GetRange(ctx, "k", 0, -1)
			if err == nil || !store.IsTransient(err) {
				t.Fatalf("GetRange through retries = %v, want a retryable error after the attempts", err)
			}
			if got := retries.Retries()[store.OpReason{Op: "GetObject", Reason: c.code}]; got != 2 {
				t.Errorf("retries of GetObject for %s = %d, want 2 (%v)", c.code, got, retries.Retries())
			}
			if throttled.Load() != 2 {
				t.Errorf("retries counted as throttling = %d, want 2", throttled.Load())
			}
			if got := requests.Statuses()[store.OpStatus{Op: "GetBlob", Status: c.status}]; got != 3 {
				t.Errorf("GetBlob requests answered %d = %d, want 3 (%v)", c.status, got, requests.Statuses())
			}
		})
	}
}

// TestClassifyOffline: errors that need no server to tell. A request
// that got no answer names its URL without the query, where a shared
// access signature would be; a container being deleted passes; a 404
// that names no blob is not a missing key.
func TestClassifyOffline(t *testing.T) {
	const secret = "sv=2024-11-04&sig=c2VjcmV0LXNpZ25hdHVyZQ%3D%3D"
	err := classify("PutBlock", "k", fmt.Errorf("part 1: %w", &url.Error{Op: "Put", URL: "https://acct.blob.core.windows.net/c/k?" + secret, Err: io.ErrUnexpectedEOF}))
	if msg := err.Error(); strings.Contains(msg, "sig=") || strings.Contains(msg, "c2VjcmV0") || !strings.Contains(msg, "acct.blob.core.windows.net/c/k") {
		t.Errorf("error of a request with no answer = %q: want its URL without the signature", msg)
	}
	if !store.IsTransient(err) {
		t.Errorf("a cut connection is not retryable: %v", err)
	}
	wantStoreError(t, "ContainerBeingDeleted", classify("CreateContainer", "", &azcore.ResponseError{StatusCode: 409, ErrorCode: "ContainerBeingDeleted"}), 409, "ContainerBeingDeleted", nil, true)
	se := wantStoreError(t, "a 404 naming no blob", classify("GetBlob", "k", &azcore.ResponseError{StatusCode: 404, ErrorCode: "ResourceNotFound"}), 404, "ResourceNotFound", nil, false)
	if errors.Is(se, store.ErrNotFound) {
		t.Errorf("a 404 ResourceNotFound reads as a missing key: %v", se)
	}
	wantStoreError(t, "a 404 with no code", classify("GetBlobProperties", "k", &azcore.ResponseError{StatusCode: 404}), 404, "", store.ErrNotFound, false)
}

// TestPartOverBlockLimit: a part larger than Azure's largest block is
// refused before any request, naming the limit.
func TestPartOverBlockLimit(t *testing.T) {
	st, counter := newStore(t)
	f, err := os.CreateTemp(t.TempDir(), "part")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(maxBlockSize + 1); err != nil { // sparse
		t.Fatal(err)
	}
	before := counter.Total()
	_, err = st.UploadPart(t.Context(), "big", "0123456789abcdef0123456789abcdef", 1, store.FileBody(io.NewSectionReader(f, 0, maxBlockSize+1)))
	wantStoreError(t, "a part over the block limit", err, 413, "RequestBodyTooLarge", nil, false)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(maxBlockSize)) {
		t.Errorf("error %v does not name the limit %d", err, maxBlockSize)
	}
	if n := counter.Total() - before; n != 0 {
		t.Errorf("%d requests sent for a part over the limit, want 0", n)
	}
}
