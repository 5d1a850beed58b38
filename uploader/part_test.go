package uploader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// lyingStreamer acknowledges streamed parts with a CRC32C off by one bit
// when lie is set: what a store that mangled the bytes on the way says.
type lyingStreamer struct {
	*streamingMem
	lie bool
}

func (s *lyingStreamer) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	pt, err := s.streamingMem.UploadPart(ctx, key, id, n, body)
	if s.lie && body.Streamed() && pt.CRC32C != nil {
		lied := *pt.CRC32C ^ 1
		pt.CRC32C = &lied
	}
	return pt, err
}

// TestSendBodies: send stores a part whatever holds its bytes (one
// buffer, several, a chunk filling) and records it for the Complete with
// its number, ETag, size and CRC32C; a streamed part whose acknowledged
// CRC32C is not its bytes' fails naming the part, how it was sent and
// both checksums, and records nothing.
func TestSendBodies(t *testing.T) {
	one, two := pattern(testChunk, 1), pattern(testChunk/2, 2)
	filled := func(o *Upload) body {
		f := &filling{obj: o, part: 2, buf: append(make([]byte, 0, testChunk), one...), n: testChunk, final: true}
		f.cond.L = &f.mu
		return body{fill: f}
	}
	tests := []struct {
		name string
		body func(o *Upload) body
		data []byte
		lie  string // the error when the store lies; "" when nothing streams
	}{
		{name: "one buffer", body: func(*Upload) body { return body{segs: [][]byte{one}} }, data: one},
		{name: "two buffers", body: func(*Upload) body { return body{segs: [][]byte{one, two}} }, data: append(one, two...),
			lie: "upload part 2 of k (1536 bytes in 2 chunks): acknowledged CRC32C %08x, its bytes have %08x"},
		{name: "a chunk filling", body: filled, data: one,
			lie: "upload part 2 of k (streamed, 1024 bytes): acknowledged CRC32C %08x, its bytes have %08x"},
	}
	for _, tc := range tests {
		for _, lie := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, lying %v", tc.name, lie), func(t *testing.T) {
				st := &lyingStreamer{streamingMem: newStreamingMem(), lie: lie}
				p := New(st, Config{ChunkSize: testChunk, Concurrency: 1, MaxBuffered: 2, Checksum: true, CleanupTimeout: time.Second}, nil)
				defer p.Close()
				ctx := context.Background()
				o := p.newUpload(ctx, "k", nil)
				defer o.Abort()
				if _, err := o.ensureUpload(); err != nil {
					t.Fatal(err)
				}
				err := o.send(ctx, &part{obj: o, n: 2, body: tc.body(o)})
				sum := store.CRC32C(tc.data)
				if lie && tc.lie != "" {
					want := fmt.Sprintf(tc.lie, sum^1, sum)
					if err == nil || err.Error() != want {
						t.Fatalf("send: %v, want %q", err, want)
					}
					if len(o.parts) != 0 || o.size != 0 {
						t.Fatalf("parts %+v, %d bytes recorded for a part that failed", o.parts, o.size)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(o.parts) != 1 || o.size != int64(len(tc.data)) {
					t.Fatalf("parts %+v, %d bytes recorded, want part 2 of %d bytes", o.parts, o.size, len(tc.data))
				}
				pt := o.parts[0]
				if pt.Number != 2 || pt.ETag == "" || pt.Size != int64(len(tc.data)) || pt.CRC32C == nil || *pt.CRC32C != sum {
					t.Fatalf("recorded %+v, want part 2, its ETag, %d bytes, CRC32C %08x", pt, len(tc.data), sum)
				}
			})
		}
	}
}
