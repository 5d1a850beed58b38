package reader

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/manifest"
)

// fr is a frame in key "k<obj>" at [off, off+n) with rows rows.
func fr(obj int, off, n, rows int64) want {
	return want{Key: fmt.Sprintf("k%d", obj), Frame: manifest.Frame{Object: obj, Offset: off, Length: n, Rows: rows}, Take: -1}
}

// shape renders spans as "key@off+len[at,at,...]" for readable diffs.
func shape(spans []span) []string {
	var out []string
	for _, s := range spans {
		var ats []string
		for _, f := range s.Frames {
			ats = append(ats, fmt.Sprint(f.At))
		}
		out = append(out, fmt.Sprintf("%s@%d+%d[%s]", s.Key, s.Offset, s.Length, strings.Join(ats, ",")))
	}
	return out
}

func TestPlanSpans(t *testing.T) {
	tests := []struct {
		name       string
		frames     []want
		rangeBytes int64
		gapBytes   int64
		want       []string
	}{
		{
			name:       "adjacent frames share one GET",
			frames:     []want{fr(0, 0, 100, 1), fr(0, 100, 50, 1), fr(0, 150, 10, 1)},
			rangeBytes: 1000, gapBytes: -1,
			want: []string{"k0@0+160[0,100,150]"},
		},
		{
			name:       "gap within GapBytes is read through",
			frames:     []want{fr(0, 0, 100, 1), fr(0, 130, 20, 1)},
			rangeBytes: 1000, gapBytes: 30,
			want: []string{"k0@0+150[0,130]"},
		},
		{
			name:       "gap over GapBytes splits",
			frames:     []want{fr(0, 0, 100, 1), fr(0, 131, 20, 1)},
			rangeBytes: 1000, gapBytes: 30,
			want: []string{"k0@0+100[0]", "k0@131+20[0]"},
		},
		{
			name:       "negative GapBytes joins only adjacent frames",
			frames:     []want{fr(0, 0, 10, 1), fr(0, 10, 10, 1), fr(0, 21, 10, 1)},
			rangeBytes: 1000, gapBytes: -1,
			want: []string{"k0@0+20[0,10]", "k0@21+10[0]"},
		},
		{
			name:       "run over RangeBytes splits",
			frames:     []want{fr(0, 0, 40, 1), fr(0, 40, 40, 1), fr(0, 80, 40, 1), fr(0, 120, 40, 1), fr(0, 160, 40, 1)},
			rangeBytes: 100, gapBytes: 0,
			want: []string{"k0@0+80[0,40]", "k0@80+80[0,40]", "k0@160+40[0]"},
		},
		{
			name:       "range exactly RangeBytes is allowed",
			frames:     []want{fr(0, 0, 50, 1), fr(0, 50, 50, 1)},
			rangeBytes: 100, gapBytes: 0,
			want: []string{"k0@0+100[0,50]"},
		},
		{
			name:       "oversize frame is its own GET",
			frames:     []want{fr(0, 0, 10, 1), fr(0, 10, 500, 1), fr(0, 510, 10, 1)},
			rangeBytes: 100, gapBytes: 0,
			want: []string{"k0@0+10[0]", "k0@10+500[0]", "k0@510+10[0]"},
		},
		{
			name:       "different objects never share a GET",
			frames:     []want{fr(0, 0, 10, 1), fr(1, 10, 10, 1), fr(0, 10, 10, 1)},
			rangeBytes: 1000, gapBytes: 100,
			want: []string{"k0@0+10[0]", "k1@10+10[0]", "k0@10+10[0]"},
		},
		{
			name: "frames adjacent on disk but not consecutive in delivery order",
			// The frames at 0 and 10 touch, but the one at 100 is
			// delivered between them: reading 0-20 at once would mean
			// holding bytes back or fetching them twice.
			frames:     []want{fr(0, 0, 10, 1), fr(0, 100, 10, 1), fr(0, 10, 10, 1)},
			rangeBytes: 1000, gapBytes: 50,
			want: []string{"k0@0+10[0]", "k0@100+10[0]", "k0@10+10[0]"},
		},
		{
			name:       "backward step starts a new GET",
			frames:     []want{fr(0, 100, 10, 1), fr(0, 0, 100, 1), fr(0, 110, 10, 1)},
			rangeBytes: 1000, gapBytes: 1000,
			want: []string{"k0@100+10[0]", "k0@0+120[0,110]"},
		},
		{
			name:   "nothing to read",
			frames: nil, rangeBytes: 100, gapBytes: 0,
			want: nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := shape(planSpans(tc.frames, tc.rangeBytes, tc.gapBytes))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("planSpans:\n got %q\nwant %q", got, tc.want)
			}
			// Every frame appears once, in order.
			var n int
			for _, s := range planSpans(tc.frames, tc.rangeBytes, tc.gapBytes) {
				for _, f := range s.Frames {
					if f.Frame != tc.frames[n].Frame {
						t.Errorf("frame %d out of order: %+v", n, f.Frame)
					}
					if f.At+f.Frame.Length > s.Length || s.Offset+f.At != f.Frame.Offset {
						t.Errorf("frame %d at %d does not fit span @%d+%d", n, f.At, s.Offset, s.Length)
					}
					n++
				}
			}
			if n != len(tc.frames) {
				t.Errorf("spans hold %d frames, want %d", n, len(tc.frames))
			}
		})
	}
}

func TestNormalizePartitions(t *testing.T) {
	tests := []struct {
		name    string
		in      []int
		want    []int
		wantErr string
	}{
		{name: "nil means all", in: nil, want: nil},
		{name: "empty means all", in: []int{}, want: nil},
		{name: "one", in: []int{3}, want: []int{3}},
		{name: "sorted and deduped", in: []int{5, 1, 3, 1, 5}, want: []int{1, 3, 5}},
		{name: "too high", in: []int{2, 8}, wantErr: "partition 8, stage has 8 partitions [0, 8)"},
		{name: "negative", in: []int{-1, 2}, wantErr: "partition -1, stage has 8 partitions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := normalizePartitions(tc.in, 8)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrPartition) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrPartition with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestSelectFramesOrder(t *testing.T) {
	// Worker "a" wrote p1, p0, p1; worker "b" wrote p0, p2, p0 (and an
	// empty frame, which is skipped).
	m := &manifest.Stage{Partitions: 3, Workers: []manifest.Worker{
		{Worker: "a", Objects: []manifest.Object{{Key: "a0"}}, Frames: []manifest.Frame{
			{Partition: 1, Offset: 0, Rows: 1}, {Partition: 0, Offset: 10, Rows: 1}, {Partition: 1, Offset: 20, Rows: 1}}},
		{Worker: "b", Objects: []manifest.Object{{Key: "b0"}, {Key: "b1"}}, Frames: []manifest.Frame{
			{Partition: 0, Offset: 0, Rows: 1}, {Partition: 2, Object: 1, Offset: 0, Rows: 1}, {Partition: 1, Offset: 5, Rows: 0}, {Partition: 0, Offset: 10, Rows: 1}}},
	}}
	keys := [][]string{{"K/a0"}, {"K/b0", "K/b1"}}
	render := func(ws []want) []string {
		var out []string
		for _, w := range ws {
			out = append(out, fmt.Sprintf("p%d %s#%d %s", w.Frame.Partition, m.Workers[w.Worker].Worker, w.Index, w.Key))
		}
		return out
	}
	tests := []struct {
		name       string
		partitions []int
		want       []string
	}{
		{name: "all", partitions: nil, want: []string{
			"p0 a#1 K/a0", "p0 b#0 K/b0", "p0 b#3 K/b0", "p1 a#0 K/a0", "p1 a#2 K/a0", "p2 b#1 K/b1"}},
		{name: "subset", partitions: []int{1, 2}, want: []string{
			"p1 a#0 K/a0", "p1 a#2 K/a0", "p2 b#1 K/b1"}},
		{name: "empty list means all", partitions: []int{}, want: []string{
			"p0 a#1 K/a0", "p0 b#0 K/b0", "p0 b#3 K/b0", "p1 a#0 K/a0", "p1 a#2 K/a0", "p2 b#1 K/b1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := normalizePartitions(tc.partitions, m.Partitions)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(selectFrames(m, keys, ps)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestPageFrames(t *testing.T) {
	// Five frames of 10, 5, 20, 1 and 4 rows: rows 0-9, 10-14, 15-34, 35
	// and 36-39.
	frames := []want{fr(0, 0, 1, 10), fr(0, 1, 1, 5), fr(0, 2, 1, 20), fr(0, 3, 1, 1), fr(0, 4, 1, 4)}
	type page struct {
		Index      int // frame's offset stands in for its index
		Skip, Take int64
	}
	tests := []struct {
		name          string
		offset, limit int64
		want          []page
	}{
		{name: "all", offset: 0, limit: -1, want: []page{{0, 0, -1}, {1, 0, -1}, {2, 0, -1}, {3, 0, -1}, {4, 0, -1}}},
		{name: "first frame exactly", offset: 0, limit: 10, want: []page{{0, 0, 10}}},
		{name: "inside one frame", offset: 17, limit: 3, want: []page{{2, 2, 3}}},
		{name: "across a boundary", offset: 8, limit: 4, want: []page{{0, 8, -1}, {1, 0, 2}}},
		{name: "starts on a boundary", offset: 15, limit: 21, want: []page{{2, 0, -1}, {3, 0, 1}}},
		{name: "open-ended from the middle", offset: 35, limit: -1, want: []page{{3, 0, -1}, {4, 0, -1}}},
		{name: "limit past the end", offset: 38, limit: 100, want: []page{{4, 2, -1}}},
		{name: "offset at the end", offset: 40, limit: 5, want: nil},
		{name: "offset past the end", offset: 400, limit: -1, want: nil},
		{name: "zero limit", offset: 0, limit: 0, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []page
			for _, w := range pageFrames(frames, tc.offset, tc.limit) {
				got = append(got, page{int(w.Frame.Offset), w.Skip, w.Take})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestEvenSpans checks that a read is cut into GETs whose count fills
// whole windows, as even as frame boundaries allow, within rangeBytes,
// never across objects, and that a small read is spread over the window
// in GETs of at least minEvenSpan.
func TestEvenSpans(t *testing.T) {
	const mib = 1 << 20
	frames := func(obj, n int, size int64) []want {
		var ws []want
		for i := range n {
			ws = append(ws, fr(obj, int64(i)*size, size, 10))
		}
		return ws
	}
	sizes := func(spans []span) (lo, hi int64) {
		lo = spans[0].Length
		for _, s := range spans {
			lo, hi = min(lo, s.Length), max(hi, s.Length)
		}
		return lo, hi
	}
	tests := []struct {
		name       string
		frames     []want
		rangeBytes int64
		window     int
		spans      int   // how many GETs
		lo, hi     int64 // their smallest and largest
	}{
		// planSpans: 33 GETs (32 of 8 MiB, one of 1 MiB), five rounds of 8.
		{"257 MiB, window 8", frames(0, 257, mib), 8 * mib, 8, 40, 6 * mib, 7 * mib},
		{"64 MiB fill the window exactly", frames(0, 64, mib), 8 * mib, 8, 8, 8 * mib, 8 * mib},
		{"3 MiB over a window of 8", frames(0, 12, mib/4), 8 * mib, 8, 3, mib, mib},
		{"window 1 is planSpans", frames(0, 20, mib), 8 * mib, 1, 3, 4 * mib, 8 * mib},
		{"frames larger than half the even size", frames(0, 10, 3*mib), 8 * mib, 4, 6, 3 * mib, 6 * mib},
		{"two objects", append(frames(0, 16, mib), frames(1, 16, mib)...), 8 * mib, 8, 8, 4 * mib, 4 * mib},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spans := evenSpans(tc.frames, tc.rangeBytes, -1, tc.window)
			checkSpans(t, spans, tc.frames, Options{RangeBytes: tc.rangeBytes, GapBytes: -1})
			lo, hi := sizes(spans)
			if len(spans) != tc.spans || lo != tc.lo || hi != tc.hi {
				t.Fatalf("%d GETs of %d to %d bytes, want %d of %d to %d\n%q", len(spans), lo, hi, tc.spans, tc.lo, tc.hi, shape(spans))
			}
		})
	}
}

// TestPartitionAloneSpread: a partition alone in its group that one or
// two sources hold in fewer GETs than the window is cut into up to
// window GETs of at least 1 MiB; one read from window sources or more,
// one of few large frames, one under 2 MiB, and a group of several
// partitions are planned as before.
func TestPartitionAloneSpread(t *testing.T) {
	const mib = 1 << 20
	frames := func(obj, part, n int, size int64) []want {
		var ws []want
		for i := range n {
			w := fr(obj, int64(part*n+i)*size, size, 10)
			w.Frame.Partition = part
			ws = append(ws, w)
		}
		return ws
	}
	count := func(gs []group) (n int) {
		for _, g := range gs {
			n += len(g.spans)
		}
		return n
	}
	for _, tc := range []struct {
		name   string
		ws     []want
		groups int
		gets   int
	}{
		{"4 MiB of one source: 4 GETs of 1 MiB", frames(0, 0, 64, 64<<10), 4, 4},
		{"4 MiB of two sources: 4 GETs", append(frames(0, 0, 32, 64<<10), frames(1, 0, 32, 64<<10)...), 4, 4},
		{"3 MiB of three sources: 3 GETs, one each", append(append(frames(0, 0, 16, 64<<10), frames(1, 0, 16, 64<<10)...), frames(2, 0, 16, 64<<10)...), 3, 3},
		{"four sources: as before", append(append(append(frames(0, 0, 16, 64<<10), frames(1, 0, 16, 64<<10)...), frames(2, 0, 16, 64<<10)...), frames(3, 0, 16, 64<<10)...), 4, 4},
		{"one frame of 4 MiB: one GET", frames(0, 0, 1, 4*mib), 1, 1},
		{"1.5 MiB: one GET", frames(0, 0, 24, 64<<10), 1, 1},
		{"two partitions in one group: one GET", append(frames(0, 0, 16, 64<<10), frames(0, 1, 16, 64<<10)...), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := partitionGroups(tc.ws, 8*mib, -1, 24*mib, 4)
			var all []span
			for _, g := range gs {
				all = append(all, g.spans...)
			}
			checkSpans(t, all, tc.ws, Options{RangeBytes: 8 * mib, GapBytes: -1})
			if count(gs) != tc.gets {
				t.Fatalf("%d GETs, want %d\n%q", count(gs), tc.gets, shape(all))
			}
		})
	}
}
