package azstore

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/durashuffle/durashuffle/store"
)

// listed is every blob name under prefix, uncommitted ones included.
func listed(t *testing.T, st *Store, prefix string) []string {
	t.Helper()
	var names []string
	p := st.container.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{UncommittedBlobs: true}})
	for p.More() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page.Segment.BlobItems {
			names = append(names, *b.Name)
		}
	}
	return names
}

// TestKilledWriter: a writer that staged blocks and died leaves an upload
// that ListUploads reports (its ID recovered from the block IDs) and that
// AbortMultipart clears: no uncommitted blob is left listed, and no
// object appears.
func TestKilledWriter(t *testing.T) {
	st, _ := newStore(t)
	ctx := t.Context()
	const key = "stage/worker-1/data-0.arrows"
	id, err := st.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for n := int32(1); n <= 3; n++ {
		body := bytes.Repeat([]byte{byte(n)}, 1000)
		if _, err := st.UploadPart(ctx, key, id, n, store.BytesBody(body)); err != nil {
			t.Fatalf("UploadPart %d: %v", n, err)
		}
	}
	// The writer is gone. Its blocks are a blob only a listing of
	// uncommitted blobs shows.
	if got := listed(t, st, "stage/"); !slices.Equal(got, []string{key}) {
		t.Fatalf("uncommitted blobs = %q, want [%s]", got, key)
	}
	if objs, _, err := st.List(ctx, "stage/", ""); err != nil || len(objs) != 0 {
		t.Fatalf("List = %v, %v; want no objects", objs, err)
	}
	ups, err := st.ListUploads(ctx, "stage/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Key != key || ups[0].UploadID != id || ups[0].Initiated.IsZero() {
		t.Fatalf("ListUploads = %+v, want one upload {%s %s} with an initiation time", ups, key, id)
	}
	if err := st.AbortMultipart(ctx, ups[0].Key, ups[0].UploadID); err != nil {
		t.Fatalf("AbortMultipart: %v", err)
	}
	if got := listed(t, st, "stage/"); len(got) != 0 {
		t.Errorf("after Abort, blobs listed with uncommitted ones = %q, want none", got)
	}
	if ups, err := st.ListUploads(ctx, "stage/"); err != nil || len(ups) != 0 {
		t.Errorf("after Abort, ListUploads = %v, %v; want none", ups, err)
	}
	rc, err := st.GetRange(ctx, key, 0, -1)
	if err == nil {
		rc.Close()
	}
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRange after Abort = %v, want ErrNotFound", err)
	}
}

// TestAbortLeavesCommitted: aborting an upload whose key holds a committed
// blob leaves the blob as it is and says the upload is gone.
func TestAbortLeavesCommitted(t *testing.T) {
	st, _ := newStore(t)
	ctx := t.Context()
	const key = "committed"
	if err := st.Put(ctx, key, []byte("keep me"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	id, err := st.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UploadPart(ctx, key, id, 1, store.BytesBody([]byte("late part"))); err != nil {
		t.Fatal(err)
	}
	err = st.AbortMultipart(ctx, key, id)
	wantStoreError(t, "AbortMultipart over a committed blob", err, 409, "BlobAlreadyExists", store.ErrNotFound, false)
	if errors.Is(err, store.ErrPreconditionFailed) {
		t.Errorf("AbortMultipart over a committed blob reads as a lost race: %v", err)
	}
	if got := read(t, st, key, 0, -1); string(got) != "keep me" {
		t.Errorf("blob after Abort is %q, want %q", got, "keep me")
	}
	// A committed blob with stray blocks is no open upload.
	if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Errorf("ListUploads = %v, %v; want none", ups, err)
	}
}

// TestForeignBlocks: blocks staged by another client, whose IDs are not
// the store's, are listed under one marker upload ID that Abort takes.
func TestForeignBlocks(t *testing.T) {
	st, _ := newStore(t)
	ctx := t.Context()
	const key = "foreign"
	if _, err := st.blob(key).StageBlock(ctx, "Zm9yZWlnbi0x", nopCloser([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	ups, err := st.ListUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Key != key || ups[0].UploadID != foreignUpload {
		t.Fatalf("ListUploads = %+v, want {%s %s}", ups, key, foreignUpload)
	}
	if err := st.AbortMultipart(ctx, key, ups[0].UploadID); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, st, ""); len(got) != 0 {
		t.Errorf("after Abort, blobs = %q, want none", got)
	}
}

func TestBlockID(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef"
	lens := map[int]bool{}
	for _, n := range []int32{1, 9, 10, 999, 10000} {
		b := blockID(id, n)
		lens[len(b)] = true
		if gotID, gotN, ok := parseBlockID(b); !ok || gotID != id || gotN != n {
			t.Errorf("parseBlockID(blockID(%d)) = %q %d %v", n, gotID, gotN, ok)
		}
	}
	if len(lens) != 1 {
		t.Errorf("block IDs of one upload have lengths %v, want one length", lens)
	}
	for _, bad := range []string{"", "Zm9yZWlnbi0x", "!!!"} {
		if _, _, ok := parseBlockID(bad); ok {
			t.Errorf("parseBlockID(%q) ok", bad)
		}
	}
}

// TestAbortCutBeforeDelete: an abort commits an empty, marked blob and
// then deletes it. One cut off between the two (a crash, a timeout, a
// failed delete) leaves the empty blob; ListUploads reports it as the
// upload it names, and an abort, again, deletes it. A blob a writer
// committed, even an empty one, is neither reported nor deleted.
func TestAbortCutBeforeDelete(t *testing.T) {
	st, _ := newStore(t)
	ctx := t.Context()
	const key, kept = "stage/worker-2/data-0.arrows", "stage/worker-3/empty"
	id, err := st.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UploadPart(ctx, key, id, 1, store.BytesBody(bytes.Repeat([]byte{7}, 1000))); err != nil {
		t.Fatal(err)
	}
	// The abort's first request, and no second.
	if _, err := st.commit(ctx, key, nil, true, map[string]*string{abortMeta: &id}); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, kept, nil, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ups, err := st.ListUploads(ctx, "stage/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Key != key || ups[0].UploadID != id || ups[0].Initiated.IsZero() {
		t.Fatalf("ListUploads = %+v, want the upload {%s %s} the cut abort left, with a time", ups, key, id)
	}
	if err := st.AbortMultipart(ctx, key, id); err != nil {
		t.Fatalf("AbortMultipart again: %v", err)
	}
	if got := listed(t, st, "stage/"); !slices.Equal(got, []string{kept}) {
		t.Errorf("blobs after the abort = %q, want only %s", got, kept)
	}
	if ups, err := st.ListUploads(ctx, "stage/"); err != nil || len(ups) != 0 {
		t.Errorf("ListUploads after the abort = %v, %v; want none", ups, err)
	}
	// A writer's empty blob is no abort's.
	if err := st.AbortMultipart(ctx, kept, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AbortMultipart on a committed empty blob = %v, want ErrNotFound", err)
	}
	if got := listed(t, st, "stage/"); !slices.Equal(got, []string{kept}) {
		t.Errorf("blobs after aborting at a committed key = %q, want %s kept", got, kept)
	}
}
