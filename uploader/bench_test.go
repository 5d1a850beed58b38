package uploader

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"sync/atomic"
	"testing"

	"github.com/durashuffle/durashuffle/store"
)

// nullStore takes every write and keeps nothing, so that a benchmark
// measures the pool's own work: buffers, queue, hedging, checksums and
// the bookkeeping of parts. With streams set it reads streamed parts to
// their end and acknowledges their CRC32C, as a store over https does.
type nullStore struct {
	store.Store // unused methods
	streams     bool
	next        atomic.Int64
}

func (s *nullStore) Put(context.Context, string, []byte, store.PutOptions) error { return nil }

func (s *nullStore) CreateMultipart(context.Context, string) (string, error) {
	return fmt.Sprintf("u%d", s.next.Add(1)), nil
}

func (s *nullStore) UploadPart(_ context.Context, _, _ string, n int32, body store.Body) (store.Part, error) {
	pt := store.Part{Number: n, ETag: "etag", Size: body.Size()}
	if !body.Streamed() {
		if sum, ok := body.CRC32C(); ok {
			pt.CRC32C = &sum
		}
		return pt, nil
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	if _, err := io.CopyN(h, body.Reader(), body.Size()); err != nil {
		return store.Part{}, err
	}
	sum := h.Sum32()
	pt.CRC32C = &sum
	return pt, nil
}

func (s *nullStore) CompleteMultipart(context.Context, string, string, []store.Part) error {
	return nil
}

func (s *nullStore) AbortMultipart(context.Context, string, string) error { return nil }

func (s *nullStore) StreamsParts() bool { return s.streams }

// benchObject uploads objects of chunks chunks of chunkSize bytes through
// a pool of 4 workers and 8 buffers: handed over whole, or begun and
// grown in 64 KiB appends as the chunker does over https.
func benchObject(b *testing.B, streamed bool) {
	const chunkSize, chunks = 256 << 10, 16
	st := &nullStore{streams: streamed}
	p := New(st, Config{ChunkSize: chunkSize, Concurrency: 4, MaxBuffered: 8, Checksum: true}, nil)
	defer p.Close()
	data := pattern(chunkSize, 1)
	ctx := context.Background()
	b.SetBytes(chunkSize * chunks)
	b.ReportAllocs()
	for b.Loop() {
		o := p.newUpload(ctx, "k", nil)
		for n := int32(1); n <= chunks; n++ {
			buf, err := p.acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if !streamed {
				if err := o.submit(n, append(buf, data...), n == chunks); err != nil {
					b.Fatal(err)
				}
				continue
			}
			f, err := o.begin(n, buf)
			if err != nil {
				b.Fatal(err)
			}
			for off := 0; off < chunkSize; off += 64 << 10 {
				buf = append(buf, data[off:off+64<<10]...)
				f.grow(len(buf))
			}
			f.finish(n == chunks)
		}
		if res, err := o.Finish(ctx); err != nil || res.Size != chunkSize*chunks {
			b.Fatalf("Finish = %+v, %v", res, err)
		}
	}
}

func BenchmarkUploadWhole(b *testing.B)    { benchObject(b, false) }
func BenchmarkUploadStreamed(b *testing.B) { benchObject(b, true) }
