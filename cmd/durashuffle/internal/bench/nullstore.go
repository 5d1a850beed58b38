package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/durashuffle/durashuffle/store"
)

// nullStore accepts every upload and keeps nothing: the CPU side of the
// write path alone. Requests are counted like a real store's. It keeps
// the keys of conditional puts only, and enforces If-None-Match: * on
// them as S3 does, so the commit guard passes and manifests commit once.
type nullStore struct {
	counter *store.Counter
	ids     atomic.Int64
	stored  atomic.Int64
	exists  sync.Map // keys put with IfNoneMatch
}

var _ store.Store = (*nullStore)(nil)

func (s *nullStore) Put(_ context.Context, key string, body []byte, o store.PutOptions) error {
	if o.IfNoneMatch {
		if _, loaded := s.exists.LoadOrStore(key, struct{}{}); loaded {
			s.counter.Request("PutObject", 412)
			return &store.Error{Op: "PutObject", Key: key, Status: 412, Code: "PreconditionFailed", Err: store.ErrPreconditionFailed}
		}
	}
	s.counter.Request("PutObject", 200)
	s.stored.Add(int64(len(body)))
	return nil
}

func (s *nullStore) CreateMultipart(context.Context, string) (string, error) {
	s.counter.Request("CreateMultipartUpload", 200)
	return fmt.Sprint(s.ids.Add(1)), nil
}

func (s *nullStore) UploadPart(_ context.Context, _, _ string, n int32, body store.Body) (store.Part, error) {
	s.counter.Request("UploadPart", 200)
	if body.Streamed() {
		// A stream ends only once its bytes are read.
		if _, err := io.Copy(io.Discard, body.Reader()); err != nil {
			return store.Part{}, err
		}
	}
	s.stored.Add(body.Size())
	return partOf(n, body), nil
}

func (s *nullStore) CompleteMultipart(context.Context, string, string, []store.Part) error {
	s.counter.Request("CompleteMultipartUpload", 200)
	return nil
}

func (s *nullStore) AbortMultipart(context.Context, string, string) error {
	s.counter.Request("AbortMultipartUpload", 204)
	return nil
}

func (s *nullStore) GetRange(_ context.Context, key string, _, _ int64) (io.ReadCloser, error) {
	return nil, &store.Error{Op: "GetObject", Key: key, Status: 404, Err: store.ErrNotFound}
}

func (s *nullStore) List(context.Context, string, string) ([]store.ObjectInfo, []string, error) {
	return nil, nil, nil
}

func (s *nullStore) ListUploads(context.Context, string) ([]store.UploadInfo, error) {
	return nil, nil
}

func (s *nullStore) Delete(_ context.Context, keys ...string) error {
	for _, k := range keys {
		s.exists.Delete(k)
	}
	return nil
}

// partOf is the part a store that keeps no ETags acknowledges: its
// number as ETag, with the CRC32C sent with it, if any.
func partOf(n int32, body store.Body) store.Part {
	pt := store.Part{Number: n, ETag: fmt.Sprintf(`"%d"`, n), Size: body.Size()}
	if sum, ok := body.CRC32C(); ok {
		pt.CRC32C = &sum
	}
	return pt
}
