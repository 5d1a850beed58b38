package uploader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestSink drives a Sink as the chunker does: objects start on first use
// under the keys Key gives, chunks begun and grown stream to the store,
// Take hands over the uploads in object order, and a chunk released
// while it fills fails its object, which OnFail hears once.
func TestSink(t *testing.T) {
	ctx := context.Background()
	newPool := func(st Store) *Pool {
		return New(st, Config{ChunkSize: testChunk, Concurrency: 2, MaxBuffered: 4, Checksum: true,
			streamAfter: testChunk / 4, CleanupTimeout: time.Second}, nil)
	}
	key := func(obj int) string { return fmt.Sprintf("data-%d", obj) }
	// emit writes data as chunks of object obj: begun and grown when the
	// sink streams, else handed over whole.
	emit := func(t *testing.T, s *Sink, obj int, data []byte) {
		t.Helper()
		for n := int32(1); len(data) > 0; n++ {
			buf, err := s.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			k := min(testChunk, len(data))
			if s.Streaming() {
				if err := s.Begin(obj, n, buf); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < k; i += 100 {
					buf = append(buf, data[i:min(i+100, k)]...)
					s.Grow(len(buf))
				}
			} else {
				buf = append(buf, data[:k]...)
			}
			data = data[k:]
			if err := s.Emit(obj, n, buf, len(data) == 0); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, streams := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming %v", streams), func(t *testing.T) {
			st := newStreamingMem()
			var p *Pool
			if streams {
				p = newPool(st)
			} else {
				p = newPool(&st.Mem) // no PartStreamer: chunks go whole
			}
			defer p.Close()
			k := &budget{max: 1 << 30}
			s := p.NewSink(ctx, SinkOptions{Key: key, Keeper: k})
			if s.Streaming() != streams {
				t.Fatalf("Streaming() = %v, want %v", s.Streaming(), streams)
			}
			one, two := pattern(3*testChunk+17, 1), pattern(testChunk/8, 2)
			s.Prepare(1) // starts objects 0 and 1
			emit(t, s, 0, one)
			emit(t, s, 1, two)
			objs := s.Take()
			if len(objs) != 2 || objs[0].Key() != "data-0" || objs[1].Key() != "data-1" {
				t.Fatalf("Take: %d uploads, want data-0 and data-1 in order", len(objs))
			}
			if again := s.Take(); len(again) != 0 {
				t.Fatalf("a second Take returned %d uploads, want none", len(again))
			}
			for i, want := range [][]byte{one, two} {
				res, err := objs[i].Finish(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := st.Bytes(key(i))
				if res.Size != int64(len(want)) || !bytes.Equal(got, want) {
					t.Fatalf("%s: %+v, %d bytes stored, want the %d written", key(i), res, len(got), len(want))
				}
				chunks, _, ok := objs[i].TakeKept()
				if !ok || !bytes.Equal(bytes.Join(chunks, nil), want) {
					t.Fatalf("%s: kept %d chunks (ok %v), want its bytes", key(i), len(chunks), ok)
				}
			}
			if res, _ := st.ListUploads(ctx, ""); len(res) != 0 {
				t.Fatalf("uploads left open: %v", res)
			}
		})
	}

	t.Run("a chunk released while it fills", func(t *testing.T) {
		st := newStreamingMem()
		p := newPool(st)
		defer p.Close()
		var mu sync.Mutex
		var fails []error
		s := p.NewSink(ctx, SinkOptions{Key: key, OnFail: func(err error) { mu.Lock(); fails = append(fails, err); mu.Unlock() }})
		buf, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Begin(0, 1, buf); err != nil {
			t.Fatal(err)
		}
		buf = append(buf, pattern(testChunk/2, 4)...)
		s.Grow(len(buf))
		<-st.startedCh(1)
		s.Release(buf)
		o := s.Take()[0]
		if _, err := o.Finish(ctx); !errors.Is(err, errAbandoned) {
			t.Fatalf("Finish after the chunk was released: %v, want errAbandoned", err)
		}
		mu.Lock()
		if len(fails) != 1 || !errors.Is(fails[0], errAbandoned) {
			t.Fatalf("OnFail heard %v, want the abandoned chunk once", fails)
		}
		mu.Unlock()
		if ups, _ := st.ListUploads(ctx, ""); len(ups) != 0 {
			t.Fatalf("uploads left open: %v", ups)
		}
		if n := p.Stats().Buffered; n != 0 {
			t.Fatalf("%d buffers held", n)
		}
	})
}
