package uploader_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// holding is a store whose UploadParts of one key wait until the test
// lets them go: they keep the pool's workers busy.
type holding struct {
	store.Store
	key     string
	mu      sync.Mutex
	cond    sync.Cond
	waiting int
	free    bool
}

func (h *holding) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	if key == h.key {
		h.mu.Lock()
		h.waiting++
		h.cond.Broadcast()
		for !h.free {
			h.cond.Wait()
		}
		h.mu.Unlock()
	}
	return h.Store.UploadPart(ctx, key, id, n, body)
}

// Unwrap implements store.Unwrapper: the pool streams parts through the
// store below.
func (h *holding) Unwrap() store.Store { return h.Store }

func (h *holding) waitFor(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.waiting < n {
		h.cond.Wait()
	}
}

func (h *holding) letGo() {
	h.mu.Lock()
	h.free = true
	h.mu.Unlock()
	h.cond.Broadcast()
}

// TestTailRecutOnServer: on MinIO over HTTPS (parts streamed, S3's 5 MiB
// minimum part enforced), an object of two 5 MiB chunks and 1 MiB, handed
// over while both workers are busy, is stored as two parts of 5.5 MiB,
// each sent from two chunk buffers, and reads back as written.
func TestTailRecutOnServer(t *testing.T) {
	e := testenv.MinIO(t)
	if !e.TLS() {
		t.Fatalf("MinIO endpoint %s is not https: parts would not stream", e.URL)
	}
	s3, _ := e.NewStore(t)
	h := &holding{Store: s3, key: "busy-0"}
	h.cond.L = &h.mu
	p := uploader.New(h, uploader.Config{ChunkSize: 5 << 20, Concurrency: 2, MaxBuffered: 6, Checksum: true, CleanupTimeout: 10 * time.Second}, nil)
	t.Cleanup(p.Close)
	t.Cleanup(h.letGo)
	ctx := context.Background()
	sink := func(key string) *uploader.Sink {
		return p.NewSink(ctx, uploader.SinkOptions{Key: func(obj int) string { return fmt.Sprintf("%s-%d", key, obj) }})
	}
	busy, tail := sink("busy"), sink("tail")
	create := func(s *uploader.Sink) chunker.Object {
		t.Helper()
		o, err := s.Create(0, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	write := func(o chunker.Object, b []byte) {
		t.Helper()
		if err := o.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	b := create(busy)
	write(b, make([]byte, 10<<20)) // two chunks, both streaming, held
	h.waitFor(2)

	data := make([]byte, 11<<20)
	for i := range data {
		data[i] = byte(i*131 + i>>16)
	}
	o := create(tail)
	write(o, data)
	if err := o.Finish(); err != nil {
		t.Fatal(err)
	}
	objs := tail.Take()
	if len(objs) != 1 || objs[0].Key() != "tail-0" {
		t.Fatalf("the sink started %d uploads, want one, of tail-0", len(objs))
	}
	h.letGo()
	res, err := objs[0].Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Abort()
	if err := busy.Take()[0].Abort(); err != nil {
		t.Fatal(err)
	}
	// Eight chunks and a half uploaded in two parts: the tail was re-cut.
	if res.Parts != 2 || res.Size != int64(len(data)) {
		t.Fatalf("result %+v: want 2 parts of %d bytes from one re-cut tail", res, len(data))
	}
	rc, err := s3.GetRange(ctx, "tail-0", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want the %d written", len(got), err, len(data))
	}
	if ups, err := s3.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Fatalf("uploads left open: %v (%v)", ups, err)
	}
	if b := p.Stats().Buffered; b != 0 {
		t.Fatalf("%d buffers held after the uploads", b)
	}
}
