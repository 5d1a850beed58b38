package reader

import (
	"context"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/manifest"
)

// benchStage is 4 workers writing 8 partitions, 64 frames of 2000 rows
// each, into one object per worker.
func benchStage(b *testing.B) (*memStore, *manifest.Stage, int64, int) {
	workers := make([][]fspec, 4)
	for w := range workers {
		for i := range 64 {
			workers[w] = append(workers[w], fspec{P: (i + w) % 8, Rows: 2000})
		}
	}
	st, m, order := buildStage(b, 8, frame.LZ4, workers)
	var stored int64
	for _, o := range st.objs {
		stored += int64(len(o))
	}
	return st, m, stored, len(order)
}

// BenchmarkRead reads a whole stage from memory: plainly, with every GET
// hedged (a hedge delay no GET reaches, so each runs the race and none
// fires), and from a Source that serves every range (hedged the same
// way). Each variant also runs with one GET per frame.
func BenchmarkRead(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts func(st *memStore) Options
	}{
		{"plain", func(*memStore) Options { return Options{} }},
		{"hedged", func(*memStore) Options { return Options{Hedge: NewHedger(4, time.Minute)} }},
		{"source", func(st *memStore) Options {
			return Options{Source: &fakeSource{st: st, mode: "ok"}, SourceHedge: NewHedger(4, time.Minute), SourceDelay: time.Minute}
		}},
	} {
		for _, small := range []bool{false, true} {
			name := tc.name
			if small {
				name += "/frame-ranges"
			}
			b.Run(name, func(b *testing.B) {
				st, m, stored, rows := benchStage(b)
				opts := tc.opts(st)
				if small {
					opts.RangeBytes, opts.ReadAhead = 1, 8
				}
				s := FromManifest(st, testLayout, m, opts)
				b.SetBytes(stored)
				b.ReportAllocs()
				for b.Loop() {
					recs, err := s.ReadPartitions(context.Background(), nil)
					if err != nil {
						b.Fatal(err)
					}
					n := 0
					for recs.Next() {
						n += int(recs.RecordBatch().NumRows())
					}
					err = recs.Err()
					recs.Release()
					if err != nil || n != rows {
						b.Fatalf("read %d rows (%v), want %d", n, err, rows)
					}
				}
			})
		}
	}
}

// BenchmarkDecodeGate admits and takes frames through a stream's decode
// gate: alone (never waiting), and with two fetches sharing a budget of
// two frames, so they wait for each other's frames to be taken.
func BenchmarkDecodeGate(b *testing.B) {
	b.Run("uncontended", func(b *testing.B) {
		g := newDecodeGate(64 << 20)
		head, f := &fetch{}, &fetch{}
		g.deliverFrom(head)
		for b.Loop() {
			g.admit(head, 4096)
			g.admit(f, 4096)
			g.taken(head, 4096)
			g.taken(f, 4096)
		}
	})
	b.Run("two fetches", func(b *testing.B) {
		g := newDecodeGate(2 * startShare * 4096) // room for two frames
		head, f := &fetch{}, &fetch{}
		g.deliverFrom(head)
		frames := make(chan struct{}, 2) // never full: the budget holds two
		done := make(chan struct{})
		go func() { // a fetch behind the head, decoding as room allows
			defer close(done)
			for g.admit(f, 4096) {
				frames <- struct{}{}
			}
		}()
		for b.Loop() {
			<-frames
			g.taken(f, 4096)
		}
		g.close()
		<-done
	})
}
