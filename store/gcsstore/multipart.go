package gcsstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/iterator"

	"github.com/durashuffle/durashuffle/store"
)

// A multipart upload is a parallel composite upload: each part is an
// object of its own, named
//
//	.durashuffle-parts/<key>/<upload ID>/<part number, 5 digits>
//
// and CompleteMultipart composes them, in number order, into the key.
// GCS's XML multipart API would do the same in fewer requests, but the Go
// SDK speaks only the JSON API. Everything under partsRoot belongs to
// uploads: List never returns it, ListUploads lists nothing else, and a
// bucket lifecycle rule on that one prefix (delete after a day) removes
// what a writer killed before Complete or Abort left behind.
const partsRoot = ".durashuffle-parts/"

// maxComposeSources is GCS's limit on the sources of one compose request.
const maxComposeSources = 32

// composeConcurrency bounds the compose requests of one tree level in
// flight.
const composeConcurrency = 8

func isReserved(name string) bool { return strings.HasPrefix(name, partsRoot) }

// uploadPrefix is the prefix of every object of one upload.
func uploadPrefix(key, uploadID string) string { return partsRoot + key + "/" + uploadID + "/" }

func partName(key, uploadID string, n int32) string {
	return uploadPrefix(key, uploadID) + fmt.Sprintf("%05d", n)
}

// interName names the i-th intermediate object of compose tree level
// level: not a part number, so a part never overwrites one.
func interName(key, uploadID string, level, i int) string {
	return uploadPrefix(key, uploadID) + fmt.Sprintf("c%d-%05d", level, i)
}

// parseUploadObject splits the name of an upload's object into its key
// and upload ID (from the right: a key may hold any character, an ID and
// a leaf hold no slash).
func parseUploadObject(name string) (key, uploadID string, ok bool) {
	rest, ok := strings.CutPrefix(name, partsRoot)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	j := strings.LastIndexByte(rest[:i], '/')
	if j <= 0 {
		return "", "", false
	}
	return rest[:j], rest[j+1 : i], true
}

// CreateMultipart implements store.Writer. It sends no request: an
// upload exists once its first part does.
func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	if isReserved(key) {
		return "", &store.Error{Op: "CreateMultipart", Key: key, Err: fmt.Errorf("key is under the reserved prefix %s", partsRoot)}
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", &store.Error{Op: "CreateMultipart", Key: key, Err: err}
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// UploadPart implements store.Writer: one objects.insert of the part
// object, with the body's CRC32C (if it has one) for the service to
// check. The part's ETag is the part object's generation, which
// CompleteMultipart composes exactly when the part has no CRC32C. A
// streamed body is refused: the store is no PartStreamer.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, body store.Body) (store.Part, error) {
	fail := func(status int, err error) (store.Part, error) {
		return store.Part{}, classify("objects.insert", key, &store.Error{Op: "objects.insert", Key: key, Status: status,
			Err: fmt.Errorf("part %d (%s) of upload %s: %w", n, body, uploadID, err)})
	}
	switch {
	case n < 1 || n > store.MaxParts:
		return fail(http.StatusBadRequest, fmt.Errorf("part number outside 1..%d", store.MaxParts))
	case body.Streamed():
		return fail(0, errors.New("streamed bodies are not taken (gcsstore is no PartStreamer)"))
	case uploadID == "" || strings.Contains(uploadID, "/"):
		return fail(http.StatusBadRequest, fmt.Errorf("malformed upload ID %q", uploadID))
	}
	pt := store.Part{Number: n, Size: body.Size()}
	var crc *uint32
	if sum, ok := body.CRC32C(); ok {
		crc = &sum
		pt.CRC32C = &sum
	}
	attrs, err := s.write(ctx, s.bucket.Object(partName(key, uploadID, n)), "application/octet-stream", body.Size(), crc, body.Reader())
	if err != nil {
		return store.Part{}, classify("objects.insert", key, fmt.Errorf("part %d (%s) of upload %s: %w", n, body, uploadID, err))
	}
	if attrs.Size != body.Size() {
		return fail(http.StatusOK, fmt.Errorf("service stored %d bytes", attrs.Size))
	}
	pt.ETag = strconv.FormatInt(attrs.Generation, 10)
	return pt, nil
}

// CompleteMultipart implements store.Writer. It composes the parts, in
// the order given (ascending numbers, or a 400 InvalidPartOrder), into
// key (each at the generation its ETag names when a part has no CRC32C):
// one objects.compose for up to 32 parts, else a tree (groups of 32 into
// intermediate objects, level by level). When every part carries a CRC32C the final compose sends their
// combination, which the service checks against the composite it built,
// and the composite's is checked here too. The part and intermediate
// objects are then deleted; if a delete fails, so does the Complete (as
// retryable as the delete), so that a completed upload leaves nothing to
// ListUploads, as on S3. A Complete repeated after its answer was lost
// finds its parts (or some of them) gone and returns nil if key already
// holds their composite, once what is left of the upload is deleted;
// ErrNotFound otherwise.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) error {
	const op = "objects.compose"
	refuse := func(code string, err error) error {
		return &store.Error{Op: op, Key: key, Status: http.StatusBadRequest, Code: code,
			Err: fmt.Errorf("upload %s, %d parts: %w", uploadID, len(parts), err)}
	}
	if len(parts) == 0 {
		return refuse("MalformedXML", errors.New("no parts"))
	}
	srcs := make([]*storage.ObjectHandle, len(parts))
	gens := make([]int64, len(parts))
	var size int64
	crc, haveCRC := uint32(0), true
	for i, p := range parts {
		if i > 0 && p.Number <= parts[i-1].Number {
			return refuse("InvalidPartOrder", fmt.Errorf("part %d follows part %d", p.Number, parts[i-1].Number))
		}
		gen, err := strconv.ParseInt(p.ETag, 10, 64)
		if err != nil || p.Number < 1 || p.Number > store.MaxParts {
			return refuse("InvalidPart", fmt.Errorf("%w: part %d with ETag %q is not one UploadPart returned", store.ErrPartRejected, p.Number, p.ETag))
		}
		gens[i] = gen
		size += p.Size
		if p.CRC32C == nil {
			haveCRC = false
		} else {
			crc = store.CombineCRC32C(crc, *p.CRC32C, p.Size)
		}
	}
	// With every part's CRC32C the sources are the part objects as they
	// are, whatever their generation, since the service checks the
	// composite against the combined CRC32C: two requests of one part (a
	// hedge, or a retry after a lost answer) carry the same bytes, and
	// the one that landed last replaced the generation the other
	// answered. Without, each is the generation its ETag names.
	var want *uint32
	if haveCRC {
		want = &crc
	}
	for i, p := range parts {
		srcs[i] = s.bucket.Object(partName(key, uploadID, p.Number))
		if !haveCRC {
			srcs[i] = srcs[i].Generation(gens[i])
		}
	}
	var inter []string
	for level := 0; len(srcs) > maxComposeSources; level++ {
		next, names, err := s.composeLevel(ctx, key, uploadID, level, srcs)
		inter = append(inter, names...)
		if err != nil {
			return s.completed(ctx, key, uploadID, size, want, err)
		}
		srcs = next
	}
	c := s.bucket.Object(key).ComposerFrom(srcs...)
	c.ContentType = "application/octet-stream"
	if want != nil {
		c.CRC32C, c.SendCRC32C = *want, true
	}
	attrs, err := c.Run(ctx)
	if err != nil {
		return s.completed(ctx, key, uploadID, size, want, fmt.Errorf("upload %s, %d parts: %w", uploadID, len(parts), err))
	}
	if err := checkComposite(attrs, size, want); err != nil {
		// The service refuses such a compose itself when it checks the
		// CRC32C sent; a service that did not is left as refused: the
		// composite (that generation only) goes.
		_ = s.bucket.Object(key).Generation(attrs.Generation).Delete(ctx)
		return &store.Error{Op: op, Key: key, Status: http.StatusOK, Err: fmt.Errorf("upload %s, %d parts: %w", uploadID, len(parts), err)}
	}
	names := make([]string, 0, len(parts)+len(inter))
	for _, p := range parts {
		names = append(names, partName(key, uploadID, p.Number))
	}
	return cleaned(key, uploadID, s.Delete(ctx, append(names, inter...)...))
}

// cleaned is the answer to a Complete whose composite is in place, given
// the error of deleting the upload's objects: the Complete fails if the
// delete did, and a retry (composing again, or finding the composite)
// deletes what is left.
func cleaned(key, uploadID string, err error) error {
	if err == nil {
		return nil
	}
	return &store.Error{Op: "objects.compose", Key: key, Retryable: store.IsTransient(err),
		Err: fmt.Errorf("upload %s is composed, but not all its part objects are deleted: %w", uploadID, err)}
}

// composeLevel composes srcs, in groups of 32, into intermediate objects
// of tree level level, and returns them (pinned to the generations
// composed) in order, with the names of all it wrote.
func (s *Store) composeLevel(ctx context.Context, key, uploadID string, level int, srcs []*storage.ObjectHandle) ([]*storage.ObjectHandle, []string, error) {
	groups := (len(srcs) + maxComposeSources - 1) / maxComposeSources
	next := make([]*storage.ObjectHandle, groups)
	names := make([]string, groups)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(composeConcurrency)
	for i := range groups {
		names[i] = interName(key, uploadID, level, i)
		group := srcs[i*maxComposeSources : min(len(srcs), (i+1)*maxComposeSources)]
		g.Go(func() error {
			c := s.bucket.Object(names[i]).ComposerFrom(group...)
			c.ContentType = "application/octet-stream"
			attrs, err := c.Run(gctx)
			if err != nil {
				return fmt.Errorf("upload %s: compose level %d group %d (%d sources): %w", uploadID, level, i, len(group), err)
			}
			next[i] = s.bucket.Object(names[i]).Generation(attrs.Generation)
			return nil
		})
	}
	err := g.Wait()
	return next, names, err
}

// checkComposite compares what the service says it composed with the
// parts' total size and combined CRC32C (if known).
func checkComposite(attrs *storage.ObjectAttrs, size int64, crc *uint32) error {
	switch {
	case attrs.Size != size:
		return fmt.Errorf("composite is %d bytes, parts add up to %d", attrs.Size, size)
	case crc != nil && attrs.CRC32C != *crc:
		return fmt.Errorf("composite CRC32C %08x, parts combine to %08x", attrs.CRC32C, *crc)
	}
	return nil
}

// completed is the answer to a compose that failed with err: if key
// already holds the parts' composite (an earlier attempt completed the
// upload and deleted some or all of its parts; known by size and
// combined CRC32C), the upload's remaining objects are deleted and the
// answer is that delete's; else err classified (a part gone is
// ErrNotFound: the upload no longer exists).
func (s *Store) completed(ctx context.Context, key, uploadID string, size int64, crc *uint32, err error) error {
	if crc != nil && ctx.Err() == nil {
		if attrs, aerr := s.bucket.Object(key).Attrs(ctx); aerr == nil && checkComposite(attrs, size, crc) == nil {
			return cleaned(key, uploadID, s.AbortMultipart(ctx, key, uploadID))
		}
	}
	return classify("objects.compose", key, err)
}

// AbortMultipart implements store.Writer: it deletes the upload's part
// and intermediate objects (one objects.list, then one objects.delete
// each). An upload with no objects left returns nil.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	objs, err := s.listUploadObjects(ctx, uploadPrefix(key, uploadID))
	if err != nil {
		return err
	}
	var names []string
	for _, o := range objs {
		// The prefix also matches the uploads of a key that is this key,
		// a slash and this ID followed by more; those are not this one.
		if k, id, ok := parseUploadObject(o.Name); ok && k == key && id == uploadID {
			names = append(names, o.Name)
		}
	}
	return s.Delete(ctx, names...)
}

// ListUploads implements store.Lister: the uploads with part objects
// under prefix, by key and then initiation (the oldest part's creation),
// one objects.list page per 1000 part objects.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.UploadInfo, error) {
	objs, err := s.listUploadObjects(ctx, partsRoot+prefix)
	if err != nil {
		return nil, err
	}
	type id struct{ key, upload string }
	first := map[id]time.Time{}
	for _, o := range objs {
		k, u, ok := parseUploadObject(o.Name)
		if !ok || !strings.HasPrefix(k, prefix) {
			continue
		}
		if t, seen := first[id{k, u}]; !seen || o.Created.Before(t) {
			first[id{k, u}] = o.Created
		}
	}
	uploads := make([]store.UploadInfo, 0, len(first))
	for u, t := range first {
		uploads = append(uploads, store.UploadInfo{Key: u.key, UploadID: u.upload, Initiated: t})
	}
	slices.SortFunc(uploads, func(a, b store.UploadInfo) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return a.Initiated.Compare(b.Initiated)
	})
	return uploads, nil
}

// listUploadObjects lists the objects whose names start with prefix, a
// prefix under partsRoot.
func (s *Store) listUploadObjects(ctx context.Context, prefix string) ([]*storage.ObjectAttrs, error) {
	q := &storage.Query{Prefix: prefix}
	if err := q.SetAttrSelection([]string{"Name", "Created"}); err != nil {
		return nil, err
	}
	var out []*storage.ObjectAttrs
	it := s.bucket.Objects(ctx, q)
	for {
		a, err := it.Next()
		if err == iterator.Done {
			return out, nil
		}
		if err != nil {
			return nil, classify("objects.list", strings.TrimPrefix(prefix, partsRoot), err)
		}
		out = append(out, a)
	}
}
