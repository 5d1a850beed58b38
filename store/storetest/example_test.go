package storetest_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/storetest"
)

// tracingStore is a store of one's own: it wraps another store and
// records each request by operation, as a wrapper adding tracing or
// credentials of a caller's would. Any store.Store will do, a client for
// another object store included.
type tracingStore struct {
	store.Store
	mu  sync.Mutex
	ops map[string]int
}

func (s *tracingStore) trace(op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ops == nil {
		s.ops = map[string]int{}
	}
	s.ops[op]++
}

func (s *tracingStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	s.trace("PutObject")
	return s.Store.Put(ctx, key, body, o)
}

func (s *tracingStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	s.trace("GetObject")
	return s.Store.GetRange(ctx, key, off, length)
}

func (s *tracingStore) CreateMultipart(ctx context.Context, key string) (string, error) {
	s.trace("CreateMultipartUpload")
	return s.Store.CreateMultipart(ctx, key)
}

func (s *tracingStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	s.trace("UploadPart")
	return s.Store.UploadPart(ctx, key, id, n, body)
}

func (s *tracingStore) CompleteMultipart(ctx context.Context, key, id string, parts []store.Part) error {
	s.trace("CompleteMultipartUpload")
	return s.Store.CompleteMultipart(ctx, key, id, parts)
}

func (s *tracingStore) Delete(ctx context.Context, keys ...string) error {
	s.trace("DeleteObjects")
	return s.Store.Delete(ctx, keys...)
}

// TestTracingStore holds the wrapper to the contract, as a test of the
// caller's would: a store that passes is fit for durashuffle.
func TestTracingStore(t *testing.T) {
	storetest.Run(t, &tracingStore{Store: &store.Mem{}})
}

// A client on a store of one's own (checked by storetest.Run in
// TestTracingStore above): one worker writes a partition and commits.
func Example() {
	ctx := context.Background()
	st := &tracingStore{Store: &store.Mem{}}
	c, err := durashuffle.Open(ctx, durashuffle.DefaultConfig(), durashuffle.WithStore(st))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	schema := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 1, Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	rec := b.NewRecordBatch()
	b.Release()
	if err := w.Write(0, rec); err != nil {
		log.Fatal(err)
	}
	rec.Release()
	m, err := w.Commit(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("committed %d rows in %d object\n", m.Totals.Rows, m.Totals.Objects)

	// Two puts and a delete of the commit guard's probe (once per
	// client), the data object's single put and the manifest's put.
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, op := range slices.Sorted(maps.Keys(st.ops)) {
		fmt.Println(op, st.ops[op])
	}
	// Output:
	// committed 3 rows in 1 object
	// DeleteObjects 1
	// PutObject 4
}
