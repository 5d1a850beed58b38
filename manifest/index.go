package manifest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/durashuffle/durashuffle/store"
)

// summarySize is the size of one partition's record in the index's
// summary table: rows, logical bytes, stored bytes and frames, as LE u64.
const summarySize = 32

// indexPreamble is the magic and the partition count before the entries.
const indexPreamble = 8

// Index locates a sealed stage's index object and says what is in it.
// First holds (Partitions+1) LE u32 entry indexes: partition p's entries
// are [First[p], First[p+1]), so a reader of partitions [lo, hi] fetches
// bytes EntriesOffset + EntrySize x [First[lo], First[hi+1]) and nothing
// else.
type Index struct {
	Key           string `json:"key"` // relative to the stage prefix
	Size          int64  `json:"size"`
	Entries       int64  `json:"entries"`
	EntriesOffset int64  `json:"entries_offset"`
	SummaryOffset int64  `json:"summary_offset"`
	First         []byte `json:"first"` // base64 in JSON
	// EntryBlock and EntryCRCs check the entries by block: block i holds
	// entries [i x EntryBlock, (i+1) x EntryBlock) (the last one fewer)
	// and EntryCRCs[4i:4i+4] (LE u32) is the CRC32C of their bytes,
	// block 0's starting at byte 0 of the object, so that it covers the
	// preamble too. An index without entries has one block: the
	// preamble. SummaryCRC32C is the CRC32C of the whole summary.
	EntryBlock    int    `json:"entry_block"`
	EntryCRCs     []byte `json:"entry_crcs"` // base64 in JSON
	SummaryCRC32C uint32 `json:"summary_crc32c"`
}

func (x *Index) at(p int) int64 { return int64(binary.LittleEndian.Uint32(x.First[4*p:])) }

// check verifies the index reference against the stage: a table of the
// stage's partition count, non-decreasing to Entries, sections inside
// Size. The table's own bytes bound the partition count a hostile
// manifest can make a reader allocate for.
func (x *Index) check(what string, s *Stage) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s index %s: %s", ErrCorrupt, what, x.Key, fmt.Sprintf(format, args...))
	}
	if err := checkRelKey(x.Key); err != nil {
		return bad("%v", err)
	}
	if len(x.First) != 4*(s.Partitions+1) {
		return bad("offset table of %d bytes, want %d for %d partitions", len(x.First), 4*(s.Partitions+1), s.Partitions)
	}
	if x.at(0) != 0 {
		return bad("offset table starts at %d, not 0", x.at(0))
	}
	for p := 1; p <= s.Partitions; p++ {
		if x.at(p) < x.at(p-1) {
			return bad("offset table falls from %d to %d at partition %d", x.at(p-1), x.at(p), p)
		}
	}
	if x.at(s.Partitions) != x.Entries || int64(s.Totals.Frames) != x.Entries {
		return bad("offset table holds %d entries, index says %d, totals %d frames", x.at(s.Partitions), x.Entries, s.Totals.Frames)
	}
	if x.EntriesOffset != indexPreamble || x.SummaryOffset != x.EntriesOffset+EntrySize*x.Entries ||
		x.Size != x.SummaryOffset+summarySize*int64(s.Partitions) {
		return bad("entries at %d (%d of %d bytes), summary at %d (%d partitions of %d bytes) do not fit an object of %d bytes",
			x.EntriesOffset, x.Entries, EntrySize, x.SummaryOffset, s.Partitions, summarySize, x.Size)
	}
	return checkBlockTable(what+" index "+x.Key, x.EntryCRCs, x.EntryBlock, x.Entries, 1)
}

// blockBytes returns the bytes of the index that checksum block i covers.
func (x *Index) blockBytes(i int64) (off, end int64) {
	k := int64(x.EntryBlock)
	off = x.EntriesOffset + EntrySize*i*k
	if i == 0 {
		off = 0
	}
	return off, x.EntriesOffset + EntrySize*min((i+1)*k, x.Entries)
}

func checkRelKey(k string) error {
	for i := 0; i+1 < len(k); i++ {
		if k[i] == '.' && k[i+1] == '.' {
			return fmt.Errorf("key %q climbs out of the stage", k)
		}
	}
	if k == "" || k[0] == '/' {
		return fmt.Errorf("key %q is invalid", k)
	}
	return nil
}

// PartitionStats sums one partition of a stage.
type PartitionStats struct {
	Rows         int64
	BytesLogical int64
	BytesStored  int64
	Frames       int64
}

// maxIndexGap: requested partitions whose entries are at most this many
// bytes apart share one ranged GET of the index.
const maxIndexGap = 1 << 20

// Frames returns the frames of the given partitions (in any order, with
// repeats; nil or empty for all) in delivery order: by partition, then worker in
// the stage's order, then each worker's write order. Each Frame's Worker
// is its index into s.Workers. A sealed stage reads them from its index
// object with one ranged GET for partitions [min, max] (a sparse set
// whose entries lie far apart takes a GET per cluster); a stage assembled
// from worker manifests has them in memory. Safe for concurrent use.
func (s *Stage) Frames(ctx context.Context, st store.Reader, l Layout, partitions []int) ([]Frame, error) {
	if len(partitions) == 0 {
		partitions = nil
	} else {
		if !slices.IsSorted(partitions) {
			partitions = slices.Sorted(slices.Values(partitions))
		}
		partitions = slices.Compact(slices.Clone(partitions))
		if lo, hi := partitions[0], partitions[len(partitions)-1]; lo < 0 || hi >= s.Partitions {
			return nil, fmt.Errorf("%s stage %d: partitions %d to %d asked for, the stage has %d", s.Query, s.Stage, lo, hi, s.Partitions)
		}
	}
	if s.Index == nil {
		return s.memFrames(partitions), nil
	}
	x := s.Index
	if partitions == nil {
		return s.indexFrames(ctx, st, l, 0, s.Partitions, nil)
	}
	var out []Frame
	for i := 0; i < len(partitions); {
		// A cluster: partitions[i..j] whose entries are close together.
		j := i
		for j+1 < len(partitions) && EntrySize*(x.at(partitions[j+1])-x.at(partitions[j]+1)) <= maxIndexGap {
			j++
		}
		set := partitions[i : j+1]
		var err error
		if out, err = s.indexFramesInto(ctx, st, l, set[0], set[len(set)-1]+1, set, out); err != nil {
			return nil, err
		}
		i = j + 1
	}
	return out, nil
}

func (s *Stage) indexFrames(ctx context.Context, st store.Reader, l Layout, lo, hi int, set []int) ([]Frame, error) {
	return s.indexFramesInto(ctx, st, l, lo, hi, set, nil)
}

// indexFramesInto appends to out the entries of partitions [lo, hi) that
// are in set (nil: all), read by range and checked as they arrive. The
// range read covers the whole checksum blocks holding those entries;
// each block is verified before any of its entries is used.
func (s *Stage) indexFramesInto(ctx context.Context, st store.Reader, l Layout, lo, hi int, set []int, out []Frame) ([]Frame, error) {
	x := s.Index
	from, to := x.at(lo), x.at(hi)
	if from == to {
		return out, nil
	}
	key := l.ObjectKey(s.Query, s.Stage, x.Key)
	k := int64(x.EntryBlock)
	b0, b1 := from/k, (to+k-1)/k // blocks [b0, b1)
	off, _ := x.blockBytes(b0)
	_, end := x.blockBytes(b1 - 1)
	body, err := st.GetRange(ctx, key, off, end-off)
	if err != nil {
		return out, fmt.Errorf("read index %s bytes [%d, %d): %w", key, off, end, err)
	}
	defer body.Close()
	var (
		buf  []byte // one block, reused
		p    = lo
		si   = 0
		prev = -1 // worker of the previous entry of p
	)
	for bi := b0; bi < b1; bi++ {
		boff, bend := x.blockBytes(bi)
		if int64(cap(buf)) < bend-boff {
			buf = make([]byte, bend-boff) // at most a block: EntryBlock is bounded
		}
		buf = buf[:bend-boff]
		if got, err := io.ReadFull(body, buf); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return out, fmt.Errorf("%w: index %s ends at byte %d of block %d (bytes [%d, %d) asked for)", ErrCorrupt, key, boff+int64(got), bi, off, end)
			}
			return out, fmt.Errorf("read index %s bytes [%d, %d): %w", key, off, end, err)
		}
		first := bi * k
		if got, want := crc32c(buf), blockCRC(x.EntryCRCs, bi); got != want {
			return out, crcMismatch("index "+key, fmt.Sprintf("entries [%d, %d)", first, min(first+k, x.Entries)), boff, bend, got, want)
		}
		eb := buf[len(buf)-int(EntrySize*(min(first+k, x.Entries)-first)):]
		for i := max(first, from); i < min(first+k, to); i++ {
			for i >= x.at(p+1) {
				p++
				prev = -1
			}
			f := getEntry(eb[EntrySize*(i-first):])
			if f.Partition != p {
				return out, fmt.Errorf("%w: index %s entry %d has partition %d, the offset table says %d", ErrCorrupt, key, i, f.Partition, p)
			}
			if f.Worker < prev || f.Worker >= len(s.Workers) {
				return out, fmt.Errorf("%w: index %s entry %d names worker %d of %d (after worker %d)", ErrCorrupt, key, i, f.Worker, len(s.Workers), prev)
			}
			prev = f.Worker
			if err := checkFrame(&f, s.Workers[f.Worker].Objects); err != nil {
				return out, fmt.Errorf("%w: index %s entry %d (partition %d, worker %s) %v", ErrCorrupt, key, i, p, s.Workers[f.Worker].Worker, err)
			}
			if set != nil {
				for si < len(set) && set[si] < p {
					si++
				}
				if si == len(set) || set[si] != p {
					continue
				}
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// memFrames is Frames for a stage whose workers hold their frames.
func (s *Stage) memFrames(partitions []int) []Frame {
	var in []bool
	if partitions != nil {
		in = make([]bool, s.Partitions)
		for _, p := range partitions {
			in[p] = true
		}
	}
	var out []Frame
	for wi := range s.Workers {
		w := &s.Workers[wi]
		for _, f := range w.Frames {
			if in != nil && !in[f.Partition] {
				continue
			}
			f.Worker = wi
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, byPartition)
	return out
}

// Summary returns every partition's totals: one ranged GET of the index's
// summary table for a sealed stage (no entries are read), a sum of the
// frames in memory otherwise.
func (s *Stage) Summary(ctx context.Context, st store.Reader, l Layout) ([]PartitionStats, error) {
	out := make([]PartitionStats, s.Partitions)
	if s.Index == nil {
		for _, f := range s.memFrames(nil) {
			out[f.Partition].add(&f)
		}
		return out, nil
	}
	x := s.Index
	key := l.ObjectKey(s.Query, s.Stage, x.Key)
	n := summarySize * int64(s.Partitions)
	body, err := st.GetRange(ctx, key, x.SummaryOffset, n)
	if err != nil {
		return nil, fmt.Errorf("read index summary %s bytes [%d, %d): %w", key, x.SummaryOffset, x.SummaryOffset+n, err)
	}
	defer body.Close()
	b := make([]byte, n) // n is bounded by the manifest's own offset table
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, fmt.Errorf("%w: index summary %s: %d bytes asked for at %d: %v", ErrCorrupt, key, n, x.SummaryOffset, err)
	}
	if got := crc32c(b); got != x.SummaryCRC32C {
		return nil, crcMismatch("index "+key, "summary", x.SummaryOffset, x.SummaryOffset+n, got, x.SummaryCRC32C)
	}
	le := binary.LittleEndian
	for p := range out {
		r := b[summarySize*p:]
		ps := PartitionStats{Rows: int64(le.Uint64(r)), BytesLogical: int64(le.Uint64(r[8:])),
			BytesStored: int64(le.Uint64(r[16:])), Frames: int64(le.Uint64(r[24:]))}
		if ps.Rows < 0 || ps.BytesLogical < 0 || ps.BytesStored < 0 || ps.Frames != x.at(p+1)-x.at(p) {
			return nil, fmt.Errorf("%w: index summary %s: partition %d has %+v, the offset table says %d frames", ErrCorrupt, key, p, ps, x.at(p+1)-x.at(p))
		}
		out[p] = ps
	}
	return out, nil
}

func (ps *PartitionStats) add(f *Frame) {
	ps.Rows += f.Rows
	ps.BytesLogical += f.Bytes
	ps.BytesStored += f.Length
	ps.Frames++
}

func putSummary(b []byte, ps *PartitionStats) {
	le := binary.LittleEndian
	le.PutUint64(b, uint64(ps.Rows))
	le.PutUint64(b[8:], uint64(ps.BytesLogical))
	le.PutUint64(b[16:], uint64(ps.BytesStored))
	le.PutUint64(b[24:], uint64(ps.Frames))
}

// MemSize estimates the bytes s holds in memory: the stored manifest's
// size for a sealed stage (headers and offset table), plus the frames of
// a stage assembled from worker manifests.
func (s *Stage) MemSize() int64 {
	n := int64(s.encoded)
	if n == 0 {
		n = 1024 + int64(len(s.Schema))
		for _, w := range s.Workers {
			n += 256 + 128*int64(len(w.Objects))
		}
		if s.Index != nil {
			n += int64(len(s.Index.First))
		}
	}
	for _, w := range s.Workers {
		n += 64 * int64(len(w.Frames))
	}
	return n
}
