package frame

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/pierrec/lz4/v4"

	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

// benchRecords is about one frame's worth (1 MiB logical) of the demo's
// lineitem rows, as n-row batches.
func benchRecords(b *testing.B, n int) ([]arrow.RecordBatch, int64) {
	b.Helper()
	bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Release()
	var recs []arrow.RecordBatch
	var size int64
	for _, r := range demo.Chunks(demo.Range{Lo: 0, Hi: 6000}, int64(n)) {
		for _, p := range bt.Batch(r, nil) {
			recs = append(recs, p.Record)
			size += LogicalSize(p.Record)
		}
	}
	return recs, size
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// BenchmarkEncode measures encoding one frame (Arrow IPC stream with body
// compression) from 128-row and 6000-row batches, in logical bytes/s.
func BenchmarkEncode(b *testing.B) {
	for _, batch := range []struct {
		name string
		rows int
	}{{"batches=128rows", 128}, {"batches=6000rows", 6000}} {
		recs, size := benchRecords(b, batch.rows)
		for _, c := range []string{LZ4, Zstd, None} {
			b.Run(c+"/"+batch.name, func(b *testing.B) {
				var buf bytes.Buffer
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					buf.Reset()
					if _, err := Encode(&buf, demo.Schema(), recs, c, memory.DefaultAllocator); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(buf.Len())/float64(size), "stored/logical")
			})
		}
		releaseAll(recs)
	}
}

// BenchmarkDecode measures decoding (and releasing) one frame, in
// logical bytes/s.
func BenchmarkDecode(b *testing.B) {
	recs, size := benchRecords(b, 6000)
	defer releaseAll(recs)
	for _, c := range []string{LZ4, Zstd, None} {
		var buf bytes.Buffer
		if _, err := Encode(&buf, demo.Schema(), recs, c, memory.DefaultAllocator); err != nil {
			b.Fatal(err)
		}
		enc := buf.Bytes()
		b.Run(c, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				out, err := Decode(enc, demo.Schema(), memory.DefaultAllocator)
				if err != nil {
					b.Fatal(err)
				}
				releaseAll(out)
			}
		})
	}
}

// BenchmarkConcat measures concatenating one frame's worth of 128-row
// batches into one batch, with Concat and with array.Concatenate per
// column (what Concat did before), in logical bytes/s.
func BenchmarkConcat(b *testing.B) {
	recs, size := benchRecords(b, 128)
	defer releaseAll(recs)
	schema := demo.Schema()
	b.Run("frame.Concat", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			rec, err := Concat(schema, recs, memory.DefaultAllocator)
			if err != nil {
				b.Fatal(err)
			}
			rec.Release()
		}
	})
	b.Run("array.Concatenate", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		parts := make([]arrow.Array, len(recs))
		for b.Loop() {
			for i := range schema.NumFields() {
				for j, r := range recs {
					parts[j] = r.Column(i)
				}
				c, err := array.Concatenate(parts, memory.DefaultAllocator)
				if err != nil {
					b.Fatal(err)
				}
				c.Release()
			}
		}
	})
}

// BenchmarkFrameRows measures what a frame's row count costs in stored
// bytes and encoding time: the rows of four of 2,048 partitions (the
// demo's wide shape, where each of 4 writers holds about 244 rows of a
// partition) encoded as frames of 244, 977 and 7,652 rows, with each
// codec, and with LZ4's high-compression mode (the same block format, so
// readable as lz4 frames; not a codec the writer offers) at two search
// depths for comparison. MB/s is logical bytes encoded, IPC included.
func BenchmarkFrameRows(b *testing.B) {
	const partitions = 2048
	bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, partitions, nil)
	if err != nil {
		b.Fatal(err)
	}
	acc, _ := NewAccumulator(demo.Schema())
	for _, r := range demo.Chunks(demo.Range{Lo: 0, Hi: 4 * 1024 * partitions}, 8192) {
		for _, p := range bt.Batch(r, nil) {
			if p.Partition < 4 {
				if err := acc.Append(p.Record); err != nil {
					b.Fatal(err)
				}
			}
			p.Record.Release()
		}
	}
	bt.Release()
	rows := acc.Finish()
	defer rows.Release()
	for _, n := range []int64{244, 977, 7652} {
		var frames []arrow.RecordBatch
		var logical int64
		for lo := int64(0); lo+n <= rows.NumRows(); lo += n {
			s := rows.NewSlice(lo, lo+n)
			frames = append(frames, s)
			logical += LogicalSize(s)
		}
		for _, c := range []string{LZ4, ZstdFastest, Zstd, "lz4hc-16", "lz4hc-512"} {
			b.Run(fmt.Sprintf("rows=%d/%s", n, c), func(b *testing.B) {
				codec, depth := c, 0
				if d, ok := strings.CutPrefix(c, "lz4hc-"); ok {
					codec, depth = None, atoi(b, d)
				}
				enc, err := NewEncoder(demo.Schema(), codec, memory.DefaultAllocator)
				if err != nil {
					b.Fatal(err)
				}
				defer enc.Close()
				hc := lz4.CompressorHC{Level: lz4.CompressionLevel(depth)}
				var buf bytes.Buffer
				var dst []byte
				var stored int64
				b.SetBytes(logical)
				for b.Loop() {
					stored = 0
					for _, f := range frames {
						buf.Reset()
						if _, err := enc.Encode(&buf, []arrow.RecordBatch{f}); err != nil {
							b.Fatal(err)
						}
						if depth == 0 {
							stored += int64(buf.Len())
							continue
						}
						msgs := buf.Bytes()[HeaderSize:]
						dst = slices.Grow(dst[:0], lz4.CompressBlockBound(len(msgs)))[:lz4.CompressBlockBound(len(msgs))]
						k, err := hc.CompressBlock(msgs, dst)
						if err != nil || k == 0 {
							b.Fatalf("lz4 hc of %d bytes: %d, %v", len(msgs), k, err)
						}
						stored += int64(HeaderSize + k)
					}
				}
				b.ReportMetric(float64(stored)/float64(logical), "stored/logical")
			})
		}
		releaseAll(frames)
	}
}

func atoi(b *testing.B, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkSealed measures encoding one frame of 6000-row batches with
// lz4, then with its sealing (AES-256-GCM), and decoding it, then with
// its opening: what client-side encryption adds to an encoder's and a
// decoder's CPU, in logical bytes/s.
func BenchmarkSealed(b *testing.B) {
	recs, size := benchRecords(b, 6000)
	defer releaseAll(recs)
	key := bytes.Repeat([]byte{1}, KeySize)
	s, err := NewSealer(key, "q", 0, "0", "a", [WriteIDSize]byte{1})
	if err != nil {
		b.Fatal(err)
	}
	o, _ := NewOpener(key, "q", 0)
	enc, err := NewEncoder(demo.Schema(), LZ4, memory.DefaultAllocator)
	if err != nil {
		b.Fatal(err)
	}
	defer enc.Close()
	for _, seal := range []bool{false, true} {
		b.Run(map[bool]string{false: "encode", true: "encode+seal"}[seal], func(b *testing.B) {
			var buf bytes.Buffer
			b.SetBytes(size)
			for b.Loop() {
				buf.Reset()
				if _, err := enc.Encode(&buf, recs); err != nil {
					b.Fatal(err)
				}
				if seal {
					if err := s.Seal(&buf, 0, 3); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
	var plain, sealed bytes.Buffer
	if _, err := enc.Encode(&plain, recs); err != nil {
		b.Fatal(err)
	}
	sealed.Write(plain.Bytes())
	if err := s.Seal(&sealed, 0, 3); err != nil {
		b.Fatal(err)
	}
	dec, _ := NewDecoder(demo.Schema())
	var scratch []byte
	for _, open := range []bool{false, true} {
		b.Run(map[bool]string{false: "decode", true: "open+decode"}[open], func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				f := plain.Bytes()
				if open {
					var err error
					if f, err = o.OpenTo(scratch, sealed.Bytes(), "0", "a", 3); err != nil {
						b.Fatal(err)
					}
					scratch = f[:0]
				}
				out, err := dec.Decode(f, memory.DefaultAllocator)
				if err != nil {
					b.Fatal(err)
				}
				releaseAll(out)
			}
		})
	}
}
