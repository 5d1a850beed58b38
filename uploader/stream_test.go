package uploader

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/store"
)

// streamingMem is an in-memory store that streams parts: it reads a
// streamed body as it comes, records when each part's first byte was read
// and how many attempts it took, and can fail a part's first attempt
// after half its bytes.
type streamingMem struct {
	store.Mem
	mu       sync.Mutex
	started  map[int32]chan struct{} // closed at a part's first byte
	attempts map[int32]int
	streamed map[int32]bool // a streamed attempt completed
	failOnce map[int32]bool
	refuse   string // a key whose streamed parts are refused for good after their first byte
}

func newStreamingMem() *streamingMem {
	return &streamingMem{started: map[int32]chan struct{}{}, attempts: map[int32]int{}, streamed: map[int32]bool{}, failOnce: map[int32]bool{}}
}

func (s *streamingMem) startedCh(n int32) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started[n] == nil {
		s.started[n] = make(chan struct{})
	}
	return s.started[n]
}

func (s *streamingMem) StreamsParts() bool { return true }

// UploadPart takes a streamed body as S3 does over https: it reads it as
// it comes and acknowledges its CRC32C; any other body goes to Mem.
func (s *streamingMem) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	if !body.Streamed() {
		return s.Mem.UploadPart(ctx, key, id, n, body)
	}
	size := body.Size()
	s.mu.Lock()
	s.attempts[n]++
	fail := s.failOnce[n] && s.attempts[n] == 1
	s.mu.Unlock()
	r := body.Reader()
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return store.Part{}, err
	}
	select {
	case <-s.startedCh(n):
	default:
		close(s.startedCh(n))
	}
	if key == s.refuse {
		return store.Part{}, &store.Error{Op: "UploadPart", Key: key, Status: 403, Code: "AccessDenied", Err: errors.New("access denied")}
	}
	if fail {
		if _, err := io.ReadFull(r, b[1:size/2]); err != nil {
			return store.Part{}, err
		}
		return store.Part{}, &store.Error{Op: "UploadPart", Key: key, Err: errors.New("connection reset"), Retryable: true}
	}
	if _, err := io.ReadFull(r, b[1:]); err != nil {
		return store.Part{}, err
	}
	pt, err := s.Mem.UploadPart(ctx, key, id, n, store.BytesBody(b).WithCRC32C(store.CRC32C(b)))
	if err == nil {
		s.mu.Lock()
		s.streamed[n] = true
		s.mu.Unlock()
	}
	return pt, err
}

// fill begins part n of o and appends data to it in steps of step bytes.
func fill(t *testing.T, p *Pool, o *Upload, n int32, data []byte, step int) *filling {
	t.Helper()
	buf, err := p.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f, err := o.begin(n, buf)
	if err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 {
		k := min(step, len(data))
		buf = append(buf, data[:k]...)
		data = data[k:]
		f.grow(len(buf))
	}
	return f
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestStreamedParts drives chunks handed over with begin through a store
// that streams parts: a part starts sending before its chunk is full, a
// last chunk that ends short is sent whole with its real length, output
// under streamAfter is one put, a failed attempt is replayed from the
// chunk in memory, an abandoned chunk fails its object and aborts it, and
// every buffer comes back.
func TestStreamedParts(t *testing.T) {
	newPool := func(st Store) *Pool {
		return New(st, Config{ChunkSize: testChunk, Concurrency: 2, MaxBuffered: 4, Checksum: true,
			streamAfter: testChunk / 4, CleanupTimeout: time.Second}, nil)
	}
	check := func(t *testing.T, p *Pool, st *streamingMem, key string, want []byte) {
		t.Helper()
		got, ok := st.Bytes(key)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("object %s: %d bytes (present %v), want %d bytes as written", key, len(got), ok, len(want))
		}
		if n := p.Stats().Buffered; n != 0 {
			t.Fatalf("%d buffers still held", n)
		}
	}

	t.Run("starts while filling", func(t *testing.T) {
		st := newStreamingMem()
		p := newPool(st)
		defer p.Close()
		if !p.streams {
			t.Fatal("pool on a streaming store does not stream")
		}
		o := p.newUpload(context.Background(), "k", nil)
		one, two := pattern(testChunk, 1), pattern(testChunk/2, 2)
		f := fill(t, p, o, 1, one[:testChunk/2], 64)
		select {
		case <-st.startedCh(1):
		case <-time.After(5 * time.Second):
			t.Fatal("part 1 not sending with half its chunk filled")
		}
		buf := f.buf[:testChunk/2]
		buf = append(buf, one[testChunk/2:]...)
		f.grow(len(buf))
		f.finish(false)
		f2 := fill(t, p, o, 2, two, 100)
		select {
		case <-st.startedCh(2):
		case <-time.After(5 * time.Second):
			t.Fatal("part 2 not sending")
		}
		f2.finish(true)
		res, err := o.Finish(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Parts != 2 || res.Size != int64(len(one)+len(two)) {
			t.Fatalf("result %+v, want 2 parts of %d bytes", res, len(one)+len(two))
		}
		if !st.streamed[1] || st.streamed[2] {
			t.Fatalf("streamed parts %v, want part 1 streamed and the short part 2 sent whole", st.streamed)
		}
		check(t, p, st, "k", append(one, two...))
	})

	t.Run("small output is one put", func(t *testing.T) {
		st := newStreamingMem()
		p := newPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "small", nil)
		data := pattern(testChunk/4-1, 3)
		f := fill(t, p, o, 1, data, 50)
		f.finish(true)
		res, err := o.Finish(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ups, _ := st.ListUploads(context.Background(), "")
		if res.Parts != 1 || len(st.attempts) != 0 || len(ups) != 0 {
			t.Fatalf("result %+v, streamed attempts %v, uploads %v: want one put", res, st.attempts, ups)
		}
		check(t, p, st, "small", data)
	})

	t.Run("prepared streams from the first byte", func(t *testing.T) {
		st := newStreamingMem()
		p := newPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "prep", nil)
		o.prepare()
		deadline := time.Now().Add(5 * time.Second)
		for ups, _ := st.ListUploads(context.Background(), ""); len(ups) != 1; ups, _ = st.ListUploads(context.Background(), "") {
			if time.Now().After(deadline) {
				t.Fatalf("uploads after Prepare: %v, want one created before any chunk", ups)
			}
			time.Sleep(time.Millisecond)
		}
		one, two := pattern(testChunk, 8), pattern(testChunk/3, 9)
		// Far below streamAfter (testChunk / 4): an unprepared part 1
		// would wait.
		f := fill(t, p, o, 1, one[:16], 16)
		select {
		case <-st.startedCh(1):
		case <-time.After(5 * time.Second):
			t.Fatal("prepared part 1 not sending with 16 bytes in its chunk")
		}
		buf := append(f.buf[:16], one[16:]...)
		f.grow(len(buf))
		f.finish(false)
		fill(t, p, o, 2, two, 100).finish(true)
		res, err := o.Finish(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Parts != 2 || !st.streamed[1] {
			t.Fatalf("result %+v, streamed %v: want 2 parts, part 1 streamed", res, st.streamed)
		}
		check(t, p, st, "prep", append(one, two...))
	})

	t.Run("prepared single chunk completes as one part", func(t *testing.T) {
		st := newStreamingMem()
		p := newPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "prep1", nil)
		o.prepare()
		o.prepare() // once is enough; twice creates nothing more
		data := pattern(testChunk/8, 10)
		buf, err := p.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		f, err := o.begin(1, buf)
		if err != nil {
			t.Fatal(err)
		}
		buf = append(buf, data...)
		f.grow(len(buf))
		f.finish(true)
		res, err := o.Finish(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ups, _ := st.ListUploads(context.Background(), "")
		if res.Parts != 1 || len(ups) != 0 {
			t.Fatalf("result %+v, uploads left %v: want one part and none open", res, ups)
		}
		check(t, p, st, "prep1", data)
	})

	t.Run("prepared then aborted leaves no upload", func(t *testing.T) {
		st := newStreamingMem()
		p := newPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "prepx", nil)
		o.prepare()
		if err := o.Abort(); err != nil {
			t.Fatal(err)
		}
		if ups, _ := st.ListUploads(context.Background(), ""); len(ups) != 0 {
			t.Fatalf("uploads left open after Abort: %v", ups)
		}
	})

	t.Run("retry replays from memory", func(t *testing.T) {
		st := newStreamingMem()
		st.failOnce[1] = true
		rs := retry.Wrap(st, retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, nil)
		p := newPool(rs)
		defer p.Close()
		o := p.newUpload(context.Background(), "r", nil)
		one, two := pattern(testChunk, 4), pattern(testChunk, 5)
		f := fill(t, p, o, 1, one[:testChunk/2], 128)
		<-st.startedCh(1)
		buf := append(f.buf[:testChunk/2], one[testChunk/2:]...)
		f.grow(len(buf))
		f.finish(false)
		fill(t, p, o, 2, two, 128).finish(true)
		if _, err := o.Finish(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st.attempts[1] != 2 || !st.streamed[1] {
			t.Fatalf("attempts %v streamed %v: want part 1 streamed on its second attempt", st.attempts, st.streamed)
		}
		check(t, p, st, "r", append(one, two...))
	})

	t.Run("abandoned", func(t *testing.T) {
		st := newStreamingMem()
		p := newPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "a", nil)
		fill(t, p, o, 1, pattern(testChunk, 6), 128).finish(false)
		f := fill(t, p, o, 2, pattern(testChunk/2, 7), 128)
		<-st.startedCh(2)
		f.abandon()
		if _, err := o.Finish(context.Background()); !errors.Is(err, errAbandoned) {
			t.Fatalf("finish after an abandoned chunk: %v, want errAbandoned", err)
		}
		if ups, _ := st.ListUploads(context.Background(), ""); len(ups) != 0 {
			t.Fatalf("uploads left open: %v", ups)
		}
		if n := p.Stats().Buffered; n != 0 {
			t.Fatalf("%d buffers still held", n)
		}
	})
}

// TestObjectOfItsOwnOnePutWhenStreaming: an object of NewObject no
// larger than PartBytes is one put even where the store streams parts
// and the object is written in many small writes past the 1 MiB at
// which a writer's object starts streaming: a seal's index of a few MiB
// is one request, not a multipart upload of one part (three).
func TestObjectOfItsOwnOnePutWhenStreaming(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		size       int
		puts, mpus int
	}{{"3 MiB", 3 << 20, 1, 0}, {"a part and a tail", 8<<20 + 5, 0, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			m := newStreamingMem()
			st := &putCounter{streamingMem: m}
			o := NewObject(ctx, st, "index", ObjectOptions{PartBytes: 8 << 20})
			data := bytes.Repeat([]byte("0123456789abcdef"), tc.size/16+1)[:tc.size]
			for b := data; len(b) > 0; b = b[min(len(b), 4096):] {
				if err := o.Write(b[:min(len(b), 4096)]); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := o.Complete(ctx); err != nil {
				t.Fatal(err)
			}
			if got, _ := m.Bytes("index"); !bytes.Equal(got, data) {
				t.Fatalf("stored %d bytes, want the %d written", len(got), len(data))
			}
			if puts, mpus := int(st.puts.Load()), int(st.mpus.Load()); puts != tc.puts || mpus != tc.mpus {
				t.Fatalf("%d bytes in parts of 8 MiB: %d puts and %d multipart uploads; want %d and %d", tc.size, puts, mpus, tc.puts, tc.mpus)
			}
		})
	}
}

// putCounter counts a streaming store's puts and multipart uploads.
type putCounter struct {
	*streamingMem
	puts, mpus atomic.Int32
}

func (p *putCounter) Put(ctx context.Context, key string, body []byte, opts store.PutOptions) error {
	p.puts.Add(1)
	return p.streamingMem.Put(ctx, key, body, opts)
}

func (p *putCounter) CreateMultipart(ctx context.Context, key string) (string, error) {
	p.mpus.Add(1)
	return p.streamingMem.CreateMultipart(ctx, key)
}

// TestFailedStreamedPartKeepsItsBuffer: a streamed part that fails for
// good while its writer still fills the chunk does not give the buffer
// back to the pool, where another object would take it while the writer
// still appends to it; the writer's abandon (or finish) gives it back.
func TestFailedStreamedPartKeepsItsBuffer(t *testing.T) {
	st := newStreamingMem()
	st.refuse = "a"
	p := New(st, Config{ChunkSize: testChunk, Concurrency: 2, MaxBuffered: 1, Checksum: true,
		streamAfter: 1, CleanupTimeout: time.Second}, nil)
	defer p.Close()
	a := p.newUpload(context.Background(), "a", nil)
	f := fill(t, p, a, 1, pattern(testChunk/4, 1), 64)
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		failed := a.err != nil
		a.mu.Unlock()
		if failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refused part did not fail its object")
		}
		time.Sleep(time.Millisecond)
	}
	// The writer of a has not handed its chunk back: the one buffer is
	// still its.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if buf, err := p.acquire(ctx); err == nil {
		p.release(buf)
		t.Fatal("the buffer a's writer still fills went back to the pool when its part failed")
	}
	f.abandon()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	buf, err := p.acquire(ctx2)
	if err != nil {
		t.Fatalf("the buffer is not back after the writer abandoned its chunk: %v", err)
	}
	p.release(buf)
	if err := a.Abort(); err != nil {
		t.Logf("abort of the failed object: %v", err)
	}
	if n := p.Stats().Buffered; n != 0 {
		t.Fatalf("%d buffers still held", n)
	}
}
