package durashuffle_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/store"
)

// BenchmarkEncryption writes a stage of the demo's rows through the
// whole library (writer, spill, upload into an in-memory store) and
// reads it back, plainly and under a key: what client-side encryption
// adds to a writer's and a reader's work, with no network in the way.
// Under an instruction counter (valgrind --tool=callgrind) the pairs
// compare exactly on a machine whose timings drift.
func BenchmarkEncryption(b *testing.B) {
	const partitions, rows, batch = 16, 1 << 18, 8192
	bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, partitions, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Release()
	var input []demo.Part
	for lo := int64(0); lo < rows; lo += batch {
		input = append(input, bt.Batch(demo.Range{Lo: lo, Hi: lo + batch}, nil)...)
	}
	defer func() {
		for _, p := range input {
			p.Record.Release()
		}
	}()
	ctx := context.Background()
	open := func(b *testing.B, st store.Store, encrypted bool) *durashuffle.Client {
		cfg := durashuffle.DefaultConfig()
		cfg.Store.Bucket = "bench"
		cfg.Write.SpillDir = b.TempDir()
		opts := []durashuffle.Option{durashuffle.WithStore(st)}
		if encrypted {
			opts = append(opts, durashuffle.WithEncryptionKey(bytes.Repeat([]byte{7}, 32)))
		}
		c, err := durashuffle.Open(ctx, cfg, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	write := func(b *testing.B, c *durashuffle.Client, query string) {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: partitions, Schema: demo.Schema()})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range input {
			if err := w.Write(p.Partition, p.Record); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := w.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Seal(ctx, query, 0, 1); err != nil {
			b.Fatal(err)
		}
	}
	var total int64
	for _, p := range input {
		total += p.Record.NumRows()
	}
	for _, encrypted := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "encrypted"}[encrypted]
		b.Run("write/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c := open(b, &store.Mem{}, encrypted)
				write(b, c, fmt.Sprintf("q%d", i))
				c.Close()
			}
		})
		b.Run("read/"+name, func(b *testing.B) {
			st := &store.Mem{}
			c := open(b, st, encrypted)
			defer c.Close()
			write(b, c, "q")
			objs, _, err := st.List(ctx, "", "")
			if err != nil {
				b.Fatal(err)
			}
			var stored int64
			for _, o := range objs {
				stored += o.Size
			}
			b.SetBytes(stored)
			b.ReportAllocs()
			for b.Loop() {
				s, err := c.OpenStage(ctx, "q", 0)
				if err != nil {
					b.Fatal(err)
				}
				rr, err := s.ReadPartitions(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				var n int64
				for rr.Next() {
					n += rr.RecordBatch().NumRows()
				}
				err = rr.Err()
				rr.Release()
				if err != nil || n != total {
					b.Fatalf("read %d rows (%v), want %d", n, err, total)
				}
			}
		})
	}
}
