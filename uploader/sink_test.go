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

// TestSink drives a Sink as the chunker does: objects start as Create
// gives them out, under the keys Key gives, their bytes stream to the
// store as chunks fill (whole chunks when the store does not stream), an
// object of one chunk is one put, Take hands over the uploads in object
// order, and an object aborted while its chunk fills fails, which OnFail
// hears once.
func TestSink(t *testing.T) {
	ctx := context.Background()
	newPool := func(st Store) *Pool {
		return New(st, Config{ChunkSize: testChunk, Concurrency: 2, MaxBuffered: 4, Checksum: true,
			streamAfter: testChunk / 4, CleanupTimeout: time.Second}, nil)
	}
	key := func(obj int) string { return fmt.Sprintf("data-%d", obj) }
	// write writes data as the writer's next object, in pieces of 100
	// bytes as frames come; size is the hint Create is given.
	write := func(t *testing.T, s *Sink, size int64, data []byte) {
		t.Helper()
		o, err := s.Create(size, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(data); i += 100 {
			if err := o.Write(data[i:min(i+100, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := o.Finish(); err != nil {
			t.Fatal(err)
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
			one, two := pattern(3*testChunk+17, 1), pattern(testChunk/8, 2)
			write(t, s, int64(len(one)), one) // multipart, created at once
			write(t, s, 0, two)               // one put
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
				if wantParts := []int{4, 1}[i]; res.Parts != wantParts {
					t.Fatalf("%s: %d parts, want %d", key(i), res.Parts, wantParts)
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

	t.Run("an object aborted while its chunk fills", func(t *testing.T) {
		st := newStreamingMem()
		p := newPool(st)
		defer p.Close()
		var mu sync.Mutex
		var fails []error
		s := p.NewSink(ctx, SinkOptions{Key: key, OnFail: func(err error) { mu.Lock(); fails = append(fails, err); mu.Unlock() }})
		obj, err := s.Create(0, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := obj.Write(pattern(testChunk/2, 4)); err != nil {
			t.Fatal(err)
		}
		<-st.startedCh(1)
		obj.Abort()
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
