package reader

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/durashuffle/durashuffle/manifest"
)

// bytesIn hands out fuzz bytes; past the end it returns zeros.
type bytesIn struct{ b []byte }

func (r *bytesIn) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *bytesIn) u64() uint64 {
	var b [8]byte
	for i := range b {
		b[i] = r.byte()
	}
	return binary.LittleEndian.Uint64(b[:])
}

// fuzzStage builds, from arbitrary bytes, a stage that passes the
// manifest's own checks (every frame inside its object, partitions in
// range), which is all the planner may assume: frames in any order, of any
// size, overlapping, with gaps, empty, in objects up to 2^63-1 bytes.
func fuzzStage(t *testing.T, data []byte) (*manifest.Stage, [][]string) {
	in := &bytesIn{data}
	partitions := 1 + int(in.byte()%16)
	workers := 1 + int(in.byte()%4)
	huge := in.byte()%4 == 0 // objects near the int64 limit
	m := &manifest.Stage{Query: "q", Partitions: partitions}
	for w := range workers {
		wk := manifest.Worker{Kind: manifest.KindWorker, Query: "q", Worker: fmt.Sprint(w), Attempt: "a", Compression: "lz4", Partitions: partitions}
		for o := range 1 + int(in.byte()%3) {
			size := int64(1 + in.u64()%(1<<20))
			if huge {
				size = math.MaxInt64 - int64(in.u64()%(1<<20))
			}
			wk.Objects = append(wk.Objects, manifest.Object{Key: manifest.DataName(wk.Worker, "a", "00000000000000ab", o), Size: size})
		}
		for range int(in.byte() % 24) {
			obj := int(in.byte()) % len(wk.Objects)
			size := wk.Objects[obj].Size
			off := int64(in.u64() % uint64(size))
			length := 1 + int64(in.u64()%uint64(size-off))
			if in.byte()%2 == 0 && length > 1<<16 {
				length = 1 + length%(1<<16) // mostly frames of sane size
			}
			wk.Frames = append(wk.Frames, manifest.Frame{
				Partition: int(in.byte()) % partitions, Object: obj, Offset: off, Length: length,
				Rows: int64(in.byte() % 8), // 0: an empty frame, which is skipped
			})
		}
		if err := wk.Check("fuzz"); err != nil {
			t.Fatalf("the harness built an invalid manifest: %v", err)
		}
		m.Workers = append(m.Workers, wk)
	}
	keys := make([][]string, len(m.Workers))
	for i, w := range m.Workers {
		for _, o := range w.Objects {
			keys[i] = append(keys[i], "k/"+o.Key)
		}
	}
	return m, keys
}

// FuzzPlan: for any valid stage, partition list, page and range options,
// selectFrames, pageFrames and planSpans deliver exactly the requested
// rows' frames in the documented order, and every span is one ranged GET
// that holds its frames, within read_range_bytes unless it is a single
// oversized frame, with gaps of at most read_gap_bytes.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 1, 3}, int64(0), int64(-1), int64(8<<20), int64(256<<10), []byte{0, 2})
	f.Add([]byte{15, 3, 0, 2, 9, 9, 9, 9, 9, 9, 9, 9, 20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, int64(5), int64(3), int64(1), int64(-1), []byte{})
	f.Add([]byte("a longer run of bytes that makes many frames in several objects of several workers"), int64(100), int64(1000), int64(64<<10), int64(0), []byte{1, 1, 7})
	f.Add([]byte{0, 0, 0}, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), []byte{0})
	f.Add([]byte{7, 2, 0, 1, 255, 255, 255, 255, 255, 255, 255, 127}, int64(0), int64(0), int64(-5), int64(-5), []byte{200})
	f.Fuzz(func(t *testing.T, data []byte, offset, limit, rangeBytes, gapBytes int64, parts []byte) {
		m, keys := fuzzStage(t, data)
		o := Options{RangeBytes: rangeBytes, GapBytes: gapBytes}.withDefaults()
		if offset < 0 {
			offset = -offset // ReadResults refuses a negative offset
			if offset < 0 {
				offset = 0
			}
		}
		var req []int
		for _, p := range parts {
			req = append(req, int(p)-8) // some negative, some past the end
		}
		ps, err := normalizePartitions(req, m.Partitions)
		if err != nil {
			for _, p := range req {
				if p < 0 || p >= m.Partitions {
					return // rightly refused
				}
			}
			t.Fatalf("partitions %v of %d refused: %v", req, m.Partitions, err)
		}
		for _, p := range req {
			if p < 0 || p >= m.Partitions {
				t.Fatalf("partition %d of %d accepted", p, m.Partitions)
			}
		}

		// selectFrames: exactly the non-empty frames of the partitions, by
		// partition, then worker, then write order.
		ws := selectFrames(m, keys, ps)
		var expect []want
		for p := range m.Partitions {
			if ps != nil && !slices.Contains(ps, p) {
				continue
			}
			for wi, w := range m.Workers {
				for fi, fr := range w.Frames {
					if fr.Partition == p && fr.Rows > 0 {
						expect = append(expect, want{Worker: wi, Index: fi, Key: keys[wi][fr.Object], Frame: fr, Take: -1})
					}
				}
			}
		}
		if !slices.Equal(ws, expect) {
			t.Fatalf("selectFrames: %d frames, want %d in order", len(ws), len(expect))
		}

		// pageFrames: exactly rows [offset, offset+limit) of them.
		var total int64
		for _, w := range ws {
			total += w.Frame.Rows
		}
		wantRows := max(0, total-min(offset, total))
		if limit >= 0 {
			wantRows = min(wantRows, limit)
		}
		page := pageFrames(ws, offset, limit)
		var got int64
		for i, w := range page {
			if w.Skip < 0 || w.Skip >= w.Frame.Rows || (i > 0 && w.Skip != 0) {
				t.Fatalf("page frame %d skips %d of %d rows", i, w.Skip, w.Frame.Rows)
			}
			n := w.Frame.Rows - w.Skip
			if w.Take >= 0 {
				if w.Take == 0 || w.Take > n || i != len(page)-1 {
					t.Fatalf("page frame %d of %d takes %d of %d rows", i, len(page), w.Take, n)
				}
				n = w.Take
			}
			got += n
		}
		if got != wantRows {
			t.Fatalf("page of %d rows at %d of %d: delivers %d rows, want %d", limit, offset, total, got, wantRows)
		}

		// planSpans, and evenSpans over a window: the page's frames, in
		// order, in GETs that hold them.
		for _, spans := range [][]span{planSpans(page, o.RangeBytes, o.GapBytes), evenSpans(page, o.RangeBytes, o.GapBytes, int(1+offset%9))} {
			checkSpans(t, spans, page, o)
		}
	})
}

// checkSpans fails unless spans deliver exactly page's frames, in order,
// each within its span's bytes, with no overlap, no gap over o.GapBytes
// and no span of several frames over o.RangeBytes.
func checkSpans(t *testing.T, spans []span, page []want, o Options) {
	t.Helper()
	var flat []want
	for si, sp := range spans {
		if len(sp.Frames) == 0 || sp.Offset < 0 || sp.Length <= 0 {
			t.Fatalf("span %d: %+v", si, sp)
		}
		end := sp.Offset
		for j, sf := range sp.Frames {
			fr := sf.Frame
			if sf.Key != sp.Key || sf.At != fr.Offset-sp.Offset || sf.At < 0 || sf.At+fr.Length > sp.Length {
				t.Fatalf("span %d (%s @%d +%d) frame %d at %d: %+v", si, sp.Key, sp.Offset, sp.Length, j, sf.At, fr)
			}
			if j > 0 && (fr.Offset < end || fr.Offset-end > max(o.GapBytes, 0)) {
				t.Fatalf("span %d frame %d at %d after %d: overlaps or gap over %d", si, j, fr.Offset, end, o.GapBytes)
			}
			end = fr.Offset + fr.Length
			flat = append(flat, sf.want)
		}
		if end != sp.Offset+sp.Length {
			t.Fatalf("span %d ends at %d, its last frame at %d", si, sp.Offset+sp.Length, end)
		}
		if len(sp.Frames) > 1 && sp.Length > o.RangeBytes {
			t.Fatalf("span %d of %d bytes with %d frames exceeds range %d", si, sp.Length, len(sp.Frames), o.RangeBytes)
		}
	}
	if !slices.Equal(flat, page) {
		t.Fatalf("spans deliver %d frames, want the page's %d in order", len(flat), len(page))
	}
}
