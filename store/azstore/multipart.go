package azstore

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/durashuffle/durashuffle/store"
)

// A multipart upload is a block blob's staged blocks. Azure has no
// upload object: CreateMultipart only draws an ID, UploadPart is Put
// Block, CompleteMultipart is Put Block List, and AbortMultipart discards
// the key's uncommitted blocks. A block's ID names its upload and part
// number, "<upload ID>-<part number>" in base64, always of one length as
// Azure requires of the IDs of one blob.
const (
	uploadIDLen  = 32 // hex digits of 16 random bytes
	partDigits   = 5  // store.MaxParts is 10000
	blockIDBytes = uploadIDLen + 1 + partDigits
)

// foreignUpload is the UploadID ListUploads gives uncommitted blocks
// whose IDs are not this store's; AbortMultipart discards them too.
const foreignUpload = "foreign-blocks"

func blockID(uploadID string, n int32) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s-%0*d", uploadID, partDigits, n))
}

// parseBlockID returns the upload ID and part number a block ID of this
// store's names; ok is false for any other block ID.
func parseBlockID(id string) (uploadID string, n int32, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(id)
	if err != nil || len(raw) != blockIDBytes || raw[uploadIDLen] != '-' {
		return "", 0, false
	}
	if _, err := hex.DecodeString(string(raw[:uploadIDLen])); err != nil {
		return "", 0, false
	}
	v, err := strconv.ParseInt(string(raw[uploadIDLen+1:]), 10, 32)
	if err != nil || v < 1 || v > store.MaxParts {
		return "", 0, false
	}
	return string(raw[:uploadIDLen]), int32(v), true
}

func checkUpload(op, key, uploadID string, n int32) error {
	if _, err := hex.DecodeString(uploadID); err != nil || len(uploadID) != uploadIDLen {
		return &store.Error{Op: op, Key: key, Err: fmt.Errorf("%w: upload ID %q is not one this store made (%d hex digits)", store.ErrNotFound, uploadID, uploadIDLen)}
	}
	if n < 1 || n > store.MaxParts {
		return &store.Error{Op: op, Key: key, Status: 400, Err: fmt.Errorf("part number %d is outside 1..%d", n, store.MaxParts)}
	}
	return nil
}

// CreateMultipart implements store.Writer. It sends no request: Azure
// keeps no upload object, and the ID only names the upload's blocks.
func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	var b [uploadIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", &store.Error{Op: "CreateMultipart", Key: key, Err: err}
	}
	return hex.EncodeToString(b[:]), nil
}

// UploadPart implements store.Writer with one Put Block. The body is read
// once for its MD5 (and its CRC32C, checked against the one given) and
// once to send, with the MD5 in Content-MD5: Azure keeps no CRC32C, and
// refuses a block whose bytes do not match the MD5 (400 Md5Mismatch), so
// a file section that changed between the reads is refused. Streamed
// bodies are refused: the store is no PartStreamer.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, body store.Body) (store.Part, error) {
	if err := checkUpload("PutBlock", key, uploadID, n); err != nil {
		return store.Part{}, err
	}
	if body.Streamed() {
		return store.Part{}, &store.Error{Op: "PutBlock", Key: key, Err: fmt.Errorf("part %d (%s): the Azure store takes no streamed parts (Put Block needs the body's MD5 before its bytes)", n, body)}
	}
	if body.Size() > maxBlockSize {
		return store.Part{}, &store.Error{Op: "PutBlock", Key: key, Status: 413, Code: "RequestBodyTooLarge",
			Err: fmt.Errorf("part %d (%s) is %d bytes, more than Azure's largest block of %d bytes: lower max_part_size and chunk_size", n, body, body.Size(), maxBlockSize)}
	}
	rs, ok := body.Reader().(io.ReadSeeker)
	if !ok {
		return store.Part{}, &store.Error{Op: "PutBlock", Key: key, Err: fmt.Errorf("part %d (%s): body reader cannot seek", n, body)}
	}
	pt := store.Part{Number: n, Size: body.Size(), ETag: blockID(uploadID, n)}
	// One pass for both sums: the MD5 the service checks, and the
	// CRC32C given, checked here since Azure keeps none.
	md := md5.New()
	crc := crc32.New(store.CRC32CTable)
	var sums io.Writer = md
	want, checkCRC := body.CRC32C()
	if checkCRC {
		sums = io.MultiWriter(md, crc)
	}
	read, err := io.Copy(sums, rs)
	if err != nil {
		return store.Part{}, &store.Error{Op: "PutBlock", Key: key, Err: fmt.Errorf("part %d (%s): read body: %w", n, body, err)}
	}
	if read != body.Size() {
		return store.Part{}, &store.Error{Op: "PutBlock", Key: key, Err: fmt.Errorf("part %d (%s): %w: read %d bytes", n, body, store.ErrBodyChanged, read)}
	}
	if checkCRC {
		if got := crc.Sum32(); got != want {
			return store.Part{}, &store.Error{Op: "PutBlock", Key: key, Err: fmt.Errorf("part %d (%s): %w: CRC32C %08x, not the %08x given", n, body, store.ErrBodyChanged, got, want)}
		}
		pt.CRC32C = &want
	}
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return store.Part{}, &store.Error{Op: "PutBlock", Key: key, Err: fmt.Errorf("part %d (%s): rewind body: %w", n, body, err)}
	}
	_, err = s.blob(key).StageBlock(ctx, pt.ETag, streaming.NopCloser(rs), &blockblob.StageBlockOptions{
		TransactionalValidation: blob.TransferValidationTypeMD5(md.Sum(nil)),
	})
	if err != nil {
		return store.Part{}, classify("PutBlock", key, fmt.Errorf("part %d (%s): %w", n, body, err))
	}
	return pt, nil
}

// CompleteMultipart implements store.Writer with one Put Block List of
// exactly parts, in their order, which must be ascending (Azure would
// commit any order; S3 refuses it, and so does the store, before any
// request). Repeating it commits the same blocks again: idempotent.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) error {
	ids := make([]string, len(parts))
	for i, p := range parts {
		if err := checkUpload("PutBlockList", key, uploadID, p.Number); err != nil {
			return err
		}
		if i > 0 && p.Number <= parts[i-1].Number {
			return &store.Error{Op: "PutBlockList", Key: key, Status: 400, Code: "InvalidPartOrder",
				Err: fmt.Errorf("part %d follows part %d: parts must be in ascending order", p.Number, parts[i-1].Number)}
		}
		if ids[i] = blockID(uploadID, p.Number); p.ETag != ids[i] {
			return &store.Error{Op: "PutBlockList", Key: key, Status: 400,
				Err: fmt.Errorf("%w: part %d's ETag %q is not its block ID %q", store.ErrPartRejected, p.Number, p.ETag, ids[i])}
		}
	}
	_, err := s.commit(ctx, key, ids, false, nil)
	if err != nil {
		return classify("PutBlockList", key, fmt.Errorf("%d parts: %w", len(parts), err))
	}
	return nil
}

// commit sends Put Block List of ids, conditional on no committed blob at
// key when conditional, with the blob's metadata meta (nil: none).
func (s *Store) commit(ctx context.Context, key string, ids []string, conditional bool, meta map[string]*string) (*azcore.ETag, error) {
	ct := "application/octet-stream"
	in := &blockblob.CommitBlockListOptions{HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &ct}, Metadata: meta}
	if conditional {
		in.AccessConditions = ifNoneMatch
	}
	resp, err := s.blob(key).CommitBlockList(ctx, ids, in)
	return resp.ETag, err
}

// maxBlockSize is Azure's largest block, and so the largest part the
// store takes (S3 takes 5 GiB).
const maxBlockSize = 4000 << 20

// abortMeta is the metadata name an abort's empty blob carries, its value
// the upload ID: the mark that tells it from a blob a writer committed.
const abortMeta = "durashuffleabort"

// abortedUpload is the upload ID an abort's empty blob names, if the blob
// (of size bytes, with metadata meta) is one.
func abortedUpload(size int64, meta map[string]*string) (string, bool) {
	if size != 0 {
		return "", false
	}
	for k, v := range meta {
		if strings.EqualFold(k, abortMeta) {
			return deref(v), true
		}
	}
	return "", false
}

// AbortMultipart implements store.Writer. Azure has no abort (it drops
// uncommitted blocks a week after the last change), so the store makes
// one: it commits an empty block list on condition that no blob is
// committed at key, which discards every uncommitted block there, and
// deletes the empty blob. It discards every upload's blocks at key, not
// only uploadID's; durashuffle writes each key from one upload. The empty
// blob carries a mark (metadata abortMeta), so that an abort cut off
// before its delete, or retried after it, finds its blob and deletes it,
// and ListUploads reports such a blob for gc to abort again. Where a blob
// a writer committed is at key the upload no longer exists: the blob is
// left alone and the answer is ErrNotFound.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	etag, err := s.commit(ctx, key, nil, true, map[string]*string{abortMeta: &uploadID})
	if err != nil {
		e := classify("PutBlockList", key, fmt.Errorf("abort upload %s: %w", uploadID, err)).(*store.Error)
		if !errors.Is(e, store.ErrPreconditionFailed) {
			return e
		}
		props, perr := s.blob(key).GetProperties(ctx, nil)
		if perr != nil {
			pe := classify("GetBlobProperties", key, fmt.Errorf("abort upload %s: %w", uploadID, perr))
			if errors.Is(pe, store.ErrNotFound) {
				return nil // an earlier attempt's delete landed
			}
			return pe
		}
		if _, ok := abortedUpload(deref(props.ContentLength), props.Metadata); !ok {
			e.Err = fmt.Errorf("%w: upload %s: a blob is committed at the key", store.ErrNotFound, uploadID)
			return e
		}
		etag = props.ETag // an abort's empty blob, left by an attempt cut off before its delete
	}
	// Only the empty blob of an abort, not one a writer committed since.
	_, err = s.blob(key).Delete(ctx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: etag},
	}})
	if err != nil {
		e := classify("DeleteBlob", key, fmt.Errorf("abort upload %s: %w", uploadID, err)).(*store.Error)
		if errors.Is(e, store.ErrNotFound) || errors.Is(e, store.ErrPreconditionFailed) {
			return nil
		}
		return e
	}
	return nil
}

// ListUploads implements store.Lister: the blobs under prefix that hold
// uncommitted blocks and no committed content, one upload per upload ID
// among their block IDs (Get Block List), initiated when the blob was
// created; and an abort's empty blob left by an abort cut off before its
// delete, as the upload it names, for gc to abort again. It lists prefix
// twice (with and without uncommitted blobs) and asks each open blob for
// its blocks.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.UploadInfo, error) {
	committed := map[string]bool{}
	var uploads []store.UploadInfo
	for p := s.container.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}}); p.More(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("ListBlobs", prefix, err)
		}
		for _, b := range page.Segment.BlobItems {
			key := deref(b.Name)
			committed[key] = true
			if p := b.Properties; p != nil {
				if id, ok := abortedUpload(deref(p.ContentLength), b.Metadata); ok {
					uploads = append(uploads, store.UploadInfo{Key: key, UploadID: id, Initiated: deref(p.LastModified)})
				}
			}
		}
	}
	all := s.container.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:  &prefix,
		Include: container.ListBlobsInclude{UncommittedBlobs: true},
	})
	for all.More() {
		page, err := all.NextPage(ctx)
		if err != nil {
			return nil, classify("ListBlobs", prefix, err)
		}
		for _, b := range page.Segment.BlobItems {
			key := deref(b.Name)
			if committed[key] {
				continue
			}
			var created time.Time
			if p := b.Properties; p != nil {
				if created = deref(p.CreationTime); created.IsZero() {
					created = deref(p.LastModified)
				}
			}
			ids, err := s.uncommittedUploads(ctx, key)
			if err != nil {
				return nil, err
			}
			for _, id := range ids {
				uploads = append(uploads, store.UploadInfo{Key: key, UploadID: id, Initiated: created})
			}
		}
	}
	return uploads, nil
}

// uncommittedUploads returns the upload IDs of key's uncommitted blocks,
// in their first block's order; foreignUpload for blocks of IDs not this
// store's.
func (s *Store) uncommittedUploads(ctx context.Context, key string) ([]string, error) {
	resp, err := s.blob(key).GetBlockList(ctx, blockblob.BlockListTypeUncommitted, nil)
	if err != nil {
		e := classify("GetBlockList", key, err)
		if errors.Is(e, store.ErrNotFound) {
			return nil, nil // committed or aborted since the listing
		}
		return nil, e
	}
	var ids []string
	seen := map[string]bool{}
	for _, b := range resp.UncommittedBlocks {
		id, _, ok := parseBlockID(deref(b.Name))
		if !ok {
			id = foreignUpload
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}
