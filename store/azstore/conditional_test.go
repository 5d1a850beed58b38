package azstore

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/durashuffle/durashuffle/store"
)

// TestConditionalCreateSDK: both ways of creating a block blob, Put Blob
// and Put Block List, keep If-None-Match: *. The second create of a key
// is refused (409 BlobAlreadyExists, or 412) and the first one's bytes
// stay. Through the SDK itself, so that no layer of the store's can hide
// a dropped header.
func TestConditionalCreateSDK(t *testing.T) {
	st, _ := newStore(t)
	ctx := t.Context()
	cond := &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: new(azcore.ETagAny)}}
	refused := func(what string, err error) {
		t.Helper()
		var re *azcore.ResponseError
		if !errors.As(err, &re) || (re.StatusCode != http.StatusConflict && re.StatusCode != http.StatusPreconditionFailed) {
			t.Fatalf("%s: %v, want 409 or 412", what, err)
		}
		t.Logf("%s: %d %s", what, re.StatusCode, re.ErrorCode)
	}

	bb := st.blob("sdk/put-blob")
	for i, body := range []string{"first", "second"} {
		_, err := bb.Upload(ctx, streaming.NopCloser(bytes.NewReader([]byte(body))), &blockblob.UploadOptions{AccessConditions: cond})
		if i == 0 && err != nil {
			t.Fatalf("first conditional Put Blob: %v", err)
		}
		if i == 1 {
			refused("second conditional Put Blob", err)
		}
	}
	if got := read(t, st, "sdk/put-blob", 0, -1); string(got) != "first" {
		t.Errorf("after the refused Put Blob the blob is %q, want first", got)
	}

	bb = st.blob("sdk/put-block-list")
	for i, body := range []string{"first", "second"} {
		id := blockID("0123456789abcdef0123456789abcdef", int32(i+1))
		if _, err := bb.StageBlock(ctx, id, streaming.NopCloser(bytes.NewReader([]byte(body))), nil); err != nil {
			t.Fatalf("Put Block %d: %v", i+1, err)
		}
		_, err := bb.CommitBlockList(ctx, []string{id}, &blockblob.CommitBlockListOptions{AccessConditions: cond})
		if i == 0 && err != nil {
			t.Fatalf("first conditional Put Block List: %v", err)
		}
		if i == 1 {
			refused("second conditional Put Block List", err)
		}
	}
	if got := read(t, st, "sdk/put-block-list", 0, -1); string(got) != "first" {
		t.Errorf("after the refused Put Block List the blob is %q, want first", got)
	}
}

// TestConditionalComplete: the store's own commit, conditional, over two
// multipart uploads of one key: the second is refused as a lost race
// (store.ErrPreconditionFailed, not retryable) and the first stays.
func TestConditionalComplete(t *testing.T) {
	st, _ := newStore(t)
	ctx := t.Context()
	const key = "manifest"
	for i, body := range []string{"first upload", "second upload"} {
		id, err := st.CreateMultipart(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		pt, err := st.UploadPart(ctx, key, id, 1, store.BytesBody([]byte(body)).WithCRC32C(store.CRC32C([]byte(body))))
		if err != nil {
			t.Fatalf("upload %d: UploadPart: %v", i+1, err)
		}
		_, err = st.commit(ctx, key, []string{pt.ETag}, true, nil)
		err = classify("PutBlockList", key, err)
		if i == 0 && err != nil {
			t.Fatalf("first conditional complete: %v", err)
		}
		if i == 1 {
			if !errors.Is(err, store.ErrPreconditionFailed) || store.IsTransient(err) {
				t.Fatalf("second conditional complete = %v, want a lost race (ErrPreconditionFailed, not retryable)", err)
			}
			// The loser's block stays uncommitted until an abort, which
			// must leave the committed blob alone.
			if err := st.AbortMultipart(ctx, key, id); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("abort of the losing upload: %v", err)
			}
		}
	}
	if got := read(t, st, key, 0, -1); string(got) != "first upload" {
		t.Errorf("blob is %q, want the first upload's", got)
	}
}
