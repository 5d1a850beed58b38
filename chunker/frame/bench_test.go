package frame

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/testkit/demo"
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
