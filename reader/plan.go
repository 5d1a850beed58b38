package reader

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/durashuffle/durashuffle/manifest"
)

// want is one frame to deliver, with the rows of it to keep.
type want struct {
	Worker int    // index into the stage's Workers
	Index  int    // index into that worker's Frames
	Key    string // full key of the frame's object
	Frame  manifest.Frame
	Skip   int64 // leading rows to drop (results paging)
	Take   int64 // rows to keep after Skip; < 0 keeps the rest
}

// span is one ranged GET: bytes [Offset, Offset+Length) of Key, holding
// Frames in delivery order.
type span struct {
	Key    string
	Offset int64
	Length int64
	Frames []spanFrame
	useful int64 // bytes of Frames, the rest of Length is gaps
	// run is the GET the span reads its bytes from, shared with its
	// neighbours (chainRuns); nil: a GET of its own. seq is its turn.
	run *getRun
	seq int
}

// spanFrame is a frame inside a span; At is its offset within the span.
type spanFrame struct {
	want
	At int64
}

// normalizePartitions sorts and dedupes ps and checks them against the
// stage's count. Nil or empty means every partition, returned as nil.
func normalizePartitions(ps []int, count int) ([]int, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	out := slices.Clone(ps)
	slices.Sort(out)
	out = slices.Compact(out)
	for _, p := range []int{out[0], out[len(out)-1]} {
		if p < 0 || p >= count {
			return nil, fmt.Errorf("%w: partition %d, stage has %d partitions [0, %d)", ErrPartition, p, count, count)
		}
	}
	return out, nil
}

// selectFrames lists the frames of the given partitions (sorted, deduped
// and in range; nil for all) in delivery order: partition, then worker in
// manifest order, then the worker's write order. keys[w][o] is the full key
// of worker w's object o. Frames that hold no rows are left out: there is
// nothing in them to deliver.
func selectFrames(m *manifest.Stage, keys [][]string, partitions []int) []want {
	var in []bool
	if partitions != nil {
		in = make([]bool, m.Partitions)
		for _, p := range partitions {
			in[p] = true
		}
	}
	var out []want
	for wi := range m.Workers {
		w := &m.Workers[wi]
		for fi, f := range w.Frames {
			if f.Rows == 0 || (in != nil && !in[f.Partition]) {
				continue
			}
			out = append(out, want{Worker: wi, Index: fi, Key: keys[wi][f.Object], Frame: f, Take: -1})
		}
	}
	// (worker, index) is already ascending, and unique, so this sort only
	// has to group by partition; a stable sort keeps the rest as it is.
	slices.SortStableFunc(out, func(a, b want) int { return cmp.Compare(a.Frame.Partition, b.Frame.Partition) })
	return out
}

// wantFrames turns frames from a stage's index (in delivery order, with
// Worker set) into wants, leaving out frames that hold no rows. Index
// is the frame's position in fs.
func wantFrames(fs []manifest.Frame, keys [][]string) []want {
	out := make([]want, 0, len(fs))
	for i, f := range fs {
		if f.Rows == 0 {
			continue
		}
		out = append(out, want{Worker: f.Worker, Index: i, Key: keys[f.Worker][f.Object], Frame: f, Take: -1})
	}
	return out
}

// storageOrder puts ws (from selectFrames or wantFrames) in the order
// the frames are stored: worker by worker in manifest order, each
// worker's frames in write order, which is object by object and, within
// an object, by offset. planSpans then joins neighbours into GETs of up
// to RangeBytes whatever partition they belong to.
func storageOrder(ws []want) []want {
	slices.SortFunc(ws, func(a, b want) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Frame.Object, b.Frame.Object),
			cmp.Compare(a.Frame.Offset, b.Frame.Offset), cmp.Compare(a.Index, b.Index))
	})
	return ws
}

// pageFrames keeps the frames that hold rows [offset, offset+limit) of ws
// (limit < 0: to the end) and sets Skip and Take on the first and last so
// that exactly those rows are delivered. It uses the manifest's row counts
// only, so frames outside the page are never fetched.
func pageFrames(ws []want, offset, limit int64) []want {
	if limit == 0 {
		return nil
	}
	var (
		out  []want
		seen int64 // rows in frames before ws[i]
	)
	for _, w := range ws {
		rows := w.Frame.Rows
		if seen+rows <= offset {
			seen += rows
			continue
		}
		w.Skip = max(0, offset-seen)
		avail := rows - w.Skip
		seen += rows
		if limit < 0 {
			out = append(out, w)
			continue
		}
		if avail >= limit {
			w.Take = limit
			return append(out, w)
		}
		limit -= avail
		out = append(out, w)
	}
	return out
}

// planSpans walks ws in delivery order and groups consecutive frames into
// ranged GETs: a frame joins the span before it when it is in the same
// object, starts at or after the span's end with at most gapBytes between
// (the gap is fetched and dropped; gapBytes < 0 joins only adjacent
// frames), and the span stays within rangeBytes. A frame larger than
// rangeBytes is a span of its own. Only forward neighbours coalesce, so
// delivery order never needs bytes to be fetched twice or held back.
func planSpans(ws []want, rangeBytes, gapBytes int64) []span {
	return planSpansEvery(ws, rangeBytes, gapBytes, 0)
}

// minEvenSpan is the smallest GET evenSpans cuts a read into to use the
// whole window: large enough that, at the round trips and per-connection
// rates of S3, a GET spends most of its time moving bytes rather than
// waiting for its first one.
const minEvenSpan = 1 << 20

// evenSpans plans ws like planSpans, but cuts the GETs to even sizes
// whose count is a multiple of window, the GETs a stream keeps in flight.
// Whole GETs are indivisible: 33 GETs of 8 MiB through 8 connections
// take five rounds, the last with one GET and seven idle connections,
// where 40 GETs of 6.4 MiB take five full rounds of 0.8 of the time. A
// read smaller than window GETs of rangeBytes is spread over the window
// too, in GETs of at least minEvenSpan.
func evenSpans(ws []want, rangeBytes, gapBytes int64, window int) []span {
	var total int64
	for _, w := range ws {
		total += w.Frame.Length
	}
	if window < 2 || total == 0 {
		return planSpans(ws, rangeBytes, gapBytes)
	}
	n := (total + rangeBytes - 1) / rangeBytes
	n = (n + int64(window) - 1) / int64(window) * int64(window)
	n = min(n, max(1, total/min(minEvenSpan, rangeBytes)))
	return planSpansEvery(ws, rangeBytes, gapBytes, (total+n-1)/n)
}

// planSpansEvery is planSpans that also starts a new span where the
// frames' running total crosses a multiple of every bytes (0: never),
// at the frame boundary nearest to it, so that the spans come out even.
func planSpansEvery(ws []want, rangeBytes, gapBytes, every int64) []span {
	gapBytes = max(gapBytes, 0)
	var (
		out  []span
		done int64 // frame bytes before w
		cut  = every
	)
	for _, w := range ws {
		f := w.Frame
		// The nearest boundary to the cut is before f when less than half
		// of f lies before the cut.
		mid := done + f.Length/2
		split := every > 0 && mid >= cut
		if split {
			cut = (mid/every + 1) * every
		}
		done += f.Length
		if n := len(out); n > 0 && !split {
			s := &out[n-1]
			end := s.Offset + s.Length
			// A gap is read only while it is no larger than the frames the
			// GET carries: at most half of it is thrown away.
			gap := f.Offset - end
			if s.Key == w.Key && f.Offset >= end && gap <= gapBytes && gap <= s.useful+f.Length && f.Offset+f.Length-s.Offset <= rangeBytes {
				s.Frames = append(s.Frames, spanFrame{want: w, At: f.Offset - s.Offset})
				s.Length = f.Offset + f.Length - s.Offset
				s.useful += f.Length
				continue
			}
		}
		out = append(out, span{Key: w.Key, Offset: f.Offset, Length: f.Length, Frames: []spanFrame{{want: w}}, useful: f.Length})
	}
	return out
}

// spreadSpans plans one partition's frames ws like planSpans and, when
// that makes fewer GETs than window, cuts them into up to window GETs of
// at least minEvenSpan (at frame boundaries, so a partition of few large
// frames stays as it is).
func spreadSpans(ws []want, rangeBytes, gapBytes int64, window int) []span {
	spans := planSpans(ws, rangeBytes, gapBytes)
	if len(spans) >= window {
		return spans
	}
	var total int64
	for _, w := range ws {
		total += w.Frame.Length
	}
	n := min(int64(window), total/min(minEvenSpan, rangeBytes))
	if n <= int64(len(spans)) {
		return spans
	}
	return planSpansEvery(ws, rangeBytes, gapBytes, (total+n-1)/n)
}

// group is what one fetch delivers: one span, or the spans of a group of
// neighbouring partitions, fetched together and delivered sorted back
// into partition order. length is their stored bytes.
type group struct {
	spans  []span
	length int64
}

// String names the group's ranges, for messages.
func (g group) String() string {
	sp := g.spans[0]
	if len(g.spans) == 1 {
		return fmt.Sprintf("%s bytes [%d, %d)", sp.Key, sp.Offset, sp.Offset+sp.Length)
	}
	return fmt.Sprintf("%d ranges of %d bytes, the first %s bytes [%d, %d)", len(g.spans), g.length, sp.Key, sp.Offset, sp.Offset+sp.Length)
}

// partitionGroups plans ws (in ReadPartitions' order) as groups of whole
// partitions of at most groupBytes of frames each. A group of several
// partitions is planned in storage order (planSpans joins each worker's
// neighbouring frames across the partitions into GETs of up to
// rangeBytes); a partition alone in its group is already in storage
// order, and streams span by span.
//
// A partition alone that would take fewer GETs than window (one large
// source, as a combined stage's reader of a partition has) is cut into
// up to window GETs of at least minEvenSpan at frame boundaries, so that
// it moves on window connections rather than one: at most window - 1
// GETs more per partition, and none for a partition read from window
// sources or more.
func partitionGroups(ws []want, rangeBytes, gapBytes, groupBytes int64, window int) []group {
	var (
		out   []group
		cur   []want
		bytes int64
		parts int
	)
	flush := func() {
		if len(cur) == 0 {
			return
		}
		if parts == 1 {
			for _, sp := range spreadSpans(cur, rangeBytes, gapBytes, window) {
				out = append(out, group{spans: []span{sp}, length: sp.Length})
			}
		} else {
			g := group{spans: planSpans(storageOrder(slices.Clone(cur)), rangeBytes, gapBytes)}
			for _, sp := range g.spans {
				g.length += sp.Length
			}
			out = append(out, g)
		}
		cur, bytes, parts = nil, 0, 0
	}
	for i := 0; i < len(ws); {
		j := i
		var pb int64
		for j < len(ws) && ws[j].Frame.Partition == ws[i].Frame.Partition {
			pb += ws[j].Frame.Length
			j++
		}
		if parts > 0 && bytes+pb > groupBytes {
			flush()
		}
		cur = append(cur, ws[i:j]...)
		bytes += pb
		parts++
		if bytes > groupBytes {
			flush()
		}
		i = j
	}
	flush()
	return out
}
