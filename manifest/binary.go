package manifest

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// EntrySize is the size of one frame's index entry on disk: partition,
// worker, object and CRC32C as u32, then offset, length, rows and
// logical bytes as u64, all little-endian.
const EntrySize = 48

// Magic numbers of the binary objects of format 3, and of format 2,
// which a reader refuses by version.
const (
	workerMagic   = "DSM3" // worker manifest container
	indexMagic    = "DSI3" // stage index object
	workerMagicV2 = "DSM2"
)

// maxHeaderBytes bounds a worker manifest's JSON header.
const maxHeaderBytes = 64 << 20

// workerPreamble is the magic, the header length and the header's CRC32C
// before a worker manifest's JSON header. The CRC covers the first 8
// bytes (magic and length) and the header.
const workerPreamble = 12

func putEntry(b []byte, f *Frame) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(f.Partition))
	le.PutUint32(b[4:], uint32(f.Worker))
	le.PutUint32(b[8:], uint32(f.Object))
	le.PutUint32(b[12:], f.CRC32C)
	le.PutUint64(b[16:], uint64(f.Offset))
	le.PutUint64(b[24:], uint64(f.Length))
	le.PutUint64(b[32:], uint64(f.Rows))
	le.PutUint64(b[40:], uint64(f.Bytes))
}

// getEntry decodes one entry. Counts past the int64 range come out
// negative, which the callers' checks refuse.
func getEntry(b []byte) Frame {
	le := binary.LittleEndian
	return Frame{
		Partition: int(le.Uint32(b[0:])),
		Worker:    int(le.Uint32(b[4:])),
		Object:    int(le.Uint32(b[8:])),
		CRC32C:    le.Uint32(b[12:]),
		Offset:    int64(le.Uint64(b[16:])),
		Length:    int64(le.Uint64(b[24:])),
		Rows:      int64(le.Uint64(b[32:])),
		Bytes:     int64(le.Uint64(b[40:])),
	}
}

// checkFrame verifies that f lies inside object o of w.
func checkFrame(f *Frame, objs []Object) error {
	if f.Object < 0 || f.Object >= len(objs) {
		return fmt.Errorf("names object %d of %d", f.Object, len(objs))
	}
	o := objs[f.Object]
	if f.Length > maxFrameLength {
		return fmt.Errorf("is %d bytes long, more than a frame can be (%d)", f.Length, int64(maxFrameLength))
	}
	if f.Offset < 0 || f.Length <= 0 || f.Offset > o.Size-f.Length {
		return fmt.Errorf("[%d, +%d) lies outside object %s of %d bytes", f.Offset, f.Length, o.Key, o.Size)
	}
	if f.Rows < 0 || f.Bytes < 0 {
		return fmt.Errorf("has negative counts (rows %d, bytes %d)", f.Rows, f.Bytes)
	}
	return nil
}

// maxFrameLength bounds a frame's stored bytes: its header names a
// payload of at most 2^32 - 1 decompressed bytes, which LZ4 or zstd store
// in at most 1/255 more, plus the header and a sealed frame's nonce and
// tag. A reader allocates a frame's bytes before they arrive: a longer
// claim is a damaged or hostile manifest, not a frame.
const maxFrameLength = 1<<32 + 1<<25

// sortByPartition orders frames by partition, keeping write order within
// a partition, unless they already are.
func sortByPartition(fs []Frame) {
	if !slices.IsSortedFunc(fs, byPartition) {
		slices.SortStableFunc(fs, byPartition)
	}
}

func byPartition(a, b Frame) int { return cmp.Compare(a.Partition, b.Partition) }

// Encode returns the stored form of a worker manifest: magic "DSM2", the
// u32 length of the JSON header, the header, the partition offset table
// ((Partitions+1) u32 entry indexes) and the entries, sorted by
// partition. w.Frames is sorted in place (stably) if it is not.
func (w *Worker) Encode() ([]byte, error) {
	if w.Partitions < 1 || w.Partitions > MaxPartitions {
		return nil, fmt.Errorf("encode worker manifest: %d partitions, want 1 to %d", w.Partitions, MaxPartitions)
	}
	if int64(len(w.Frames)) > math.MaxUint32 {
		return nil, fmt.Errorf("encode worker manifest: %d frames, at most %d", len(w.Frames), uint32(math.MaxUint32))
	}
	for i, f := range w.Frames {
		if f.Partition < 0 || f.Partition >= w.Partitions || f.Object < 0 || int64(f.Object) > math.MaxUint32 {
			return nil, fmt.Errorf("encode worker manifest: frame %d has partition %d of %d, object %d", i, f.Partition, w.Partitions, f.Object)
		}
	}
	sortByPartition(w.Frames)
	table := make([]byte, 4*(w.Partitions+1))
	entries := make([]byte, EntrySize*len(w.Frames))
	i := 0
	for p := 0; p <= w.Partitions; p++ {
		for i < len(w.Frames) && w.Frames[i].Partition < p {
			i++
		}
		binary.LittleEndian.PutUint32(table[4*p:], uint32(i))
	}
	for i := range w.Frames {
		f := w.Frames[i]
		f.Worker = 0
		putEntry(entries[EntrySize*i:], &f)
	}
	w.TableCRC32C = crc32c(table)
	w.EntryBlock = workerEntryBlock
	w.EntryCRCs = blockSums(entries, workerEntryBlock, 0, 0)
	h, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	if len(h) > maxHeaderBytes {
		return nil, fmt.Errorf("encode worker manifest: header of %d bytes, at most %d", len(h), maxHeaderBytes)
	}
	b := make([]byte, 0, workerPreamble+len(h)+len(table)+len(entries))
	b = append(b, workerMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h)))
	b = binary.LittleEndian.AppendUint32(b, headerCRC(b[:8], h))
	b = append(b, h...)
	b = append(b, table...)
	return append(b, entries...), nil
}

// headerCRC is the CRC32C of a worker manifest's first 8 bytes (magic
// and header length) followed by its JSON header.
func headerCRC(pre, h []byte) uint32 {
	return crc32.Update(crc32c(pre[:8]), castagnoli, h)
}

// workerHead is a worker manifest's header and offset table, decoded
// from the start of the object: all Seal needs before the entries.
type workerHead struct {
	w       *Worker
	first   []byte // (Partitions+1) LE u32: partition p's entries are [first[p], first[p+1])
	entries int64  // offset of the entries in the object
	count   int    // entries
}

func (h *workerHead) at(p int) int { return int(binary.LittleEndian.Uint32(h.first[4*p:])) }

// headLength returns how many bytes of a worker manifest hold its head,
// from its first 8 bytes; ok is false when b is shorter than that. A
// JSON manifest (version 1) is refused as such.
func headLength(what string, b []byte) (n int, err error) {
	if len(b) > 0 && b[0] == '{' {
		var probe struct {
			FormatVersion string `json:"format_version"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			// A ranged read may cut a JSON manifest short: its version is
			// usually near the start.
			i := bytes.Index(b, []byte(`"format_version":"`))
			if i < 0 {
				return 0, fmt.Errorf("%w: %s is not JSON (version 1) nor a %q container: %v", ErrCorrupt, what, workerMagic, err)
			}
			v, _, _ := bytes.Cut(b[i+18:], []byte(`"`))
			probe.FormatVersion = string(v)
		}
		if err := checkVersion(what, probe.FormatVersion); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: %s is JSON with format_version %q, but a %d.x worker manifest is a binary container", ErrCorrupt, what, probe.FormatVersion, formatMajor)
	}
	if len(b) < workerPreamble {
		return 0, fmt.Errorf("%w: %s is %d bytes, shorter than the %d-byte preamble", ErrCorrupt, what, len(b), workerPreamble)
	}
	if string(b[:4]) == workerMagicV2 {
		return 0, fmt.Errorf("%w: %s starts with %q, a format 2 worker manifest without checksums; this reader understands %d.x", ErrVersion, what, b[:4], formatMajor)
	}
	if string(b[:4]) != workerMagic {
		return 0, fmt.Errorf("%w: %s starts with %q, not the magic %q (bytes [0, 4))", ErrCorrupt, what, b[:4], workerMagic)
	}
	hl := binary.LittleEndian.Uint32(b[4:])
	if hl > maxHeaderBytes {
		return 0, fmt.Errorf("%w: %s has a header of %d bytes, at most %d (header length, bytes [4, 8))", ErrCorrupt, what, hl, maxHeaderBytes)
	}
	return workerPreamble + int(hl), nil
}

// decodeHead decodes the header and offset table from b, which holds at
// least the first headLength bytes of the object. tableNeed > 0 means b
// is too short for the table: the head is tableNeed bytes.
func decodeHead(what string, b []byte) (h *workerHead, need int, err error) {
	hl, err := headLength(what, b)
	if err != nil {
		return nil, 0, err
	}
	if len(b) < hl {
		return nil, hl, nil
	}
	if got, want := headerCRC(b, b[workerPreamble:hl]), binary.LittleEndian.Uint32(b[8:]); got != want {
		return nil, 0, crcMismatch(what, "header length and header", 0, int64(hl), got, want)
	}
	var w Worker
	if err := json.Unmarshal(b[workerPreamble:hl], &w); err != nil {
		return nil, 0, fmt.Errorf("%w: %s header: %v", ErrCorrupt, what, err)
	}
	if err := checkVersion(what, w.FormatVersion); err != nil {
		return nil, 0, err
	}
	if err := w.Check(what); err != nil {
		return nil, 0, err
	}
	end := hl + 4*(w.Partitions+1)
	if len(b) < end {
		return nil, end, nil
	}
	h = &workerHead{w: &w, first: b[hl:end:end], entries: int64(end)}
	if got := crc32c(h.first); got != w.TableCRC32C {
		return nil, 0, crcMismatch(what, "offset table", int64(hl), int64(end), got, w.TableCRC32C)
	}
	prev := 0
	if h.at(0) != 0 {
		return nil, 0, fmt.Errorf("%w: %s: offset table starts at %d, not 0", ErrCorrupt, what, h.at(0))
	}
	for p := 1; p <= w.Partitions; p++ {
		v := h.at(p)
		if v < prev {
			return nil, 0, fmt.Errorf("%w: %s: offset table falls from %d to %d at partition %d", ErrCorrupt, what, prev, v, p)
		}
		prev = v
	}
	h.count = prev
	if h.count != w.Totals.Frames {
		return nil, 0, fmt.Errorf("%w: %s: offset table holds %d entries, totals say %d frames", ErrCorrupt, what, h.count, w.Totals.Frames)
	}
	if err := checkBlockTable(what, w.EntryCRCs, w.EntryBlock, int64(h.count), 0); err != nil {
		return nil, 0, err
	}
	return h, 0, nil
}

// decodeEntries decodes the entries of partitions [lo, hi) of a worker
// manifest, held in b (which starts at entry first[lo]), checking each
// against the header: partition as the offset table says, frame inside
// its object. worker is stored in each Frame's Worker field.
func (h *workerHead) decodeEntries(what string, b []byte, lo, hi, worker int, out []Frame) ([]Frame, error) {
	i := h.at(lo)
	if want := (h.at(hi) - i) * EntrySize; len(b) != want {
		return out, fmt.Errorf("%w: %s: entries of partitions [%d, %d) are %d bytes, want %d", ErrCorrupt, what, lo, hi, len(b), want)
	}
	for p := lo; p < hi; p++ {
		for end := h.at(p + 1); i < end; i++ {
			f := getEntry(b)
			b = b[EntrySize:]
			if f.Partition != p || f.Worker != 0 {
				return out, fmt.Errorf("%w: %s: entry %d has partition %d worker %d, the offset table says partition %d worker 0", ErrCorrupt, what, i, f.Partition, f.Worker, p)
			}
			if err := checkFrame(&f, h.w.Objects); err != nil {
				return out, fmt.Errorf("%w: %s: frame %d %v", ErrCorrupt, what, i, err)
			}
			f.Worker = worker
			out = append(out, f)
		}
	}
	return out, nil
}

// DecodeWorker parses and checks a whole worker manifest; what names it
// in errors. A version 1 manifest (JSON) is refused with ErrVersion.
func DecodeWorker(what string, b []byte) (*Worker, error) {
	h, need, err := decodeHead(what, b)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: %s is %d bytes, its head needs %d (bytes [0, %d), as its header length says)", ErrCorrupt, what, len(b), need, need)
	}
	rest := b[h.entries:]
	if want := int64(h.count) * EntrySize; int64(len(rest)) != want {
		return nil, fmt.Errorf("%w: %s has %d bytes of entries, its offset table says %d entries (%d bytes)", ErrCorrupt, what, len(rest), h.count, want)
	}
	if err := h.verifyEntries(what, rest, 0, int64(h.count)); err != nil {
		return nil, err
	}
	h.w.Frames, err = h.decodeEntries(what, rest, 0, h.w.Partitions, 0, make([]Frame, 0, h.count))
	if err != nil {
		return nil, err
	}
	if got := h.w.Sum(); got != h.w.Totals {
		return nil, fmt.Errorf("%w: %s: totals say %+v, frames and objects sum to %+v", ErrCorrupt, what, h.w.Totals, got)
	}
	return h.w, nil
}

// blockRange widens the entries [a, b) of a worker manifest to whole
// checksum blocks: [lo, hi) is what must be read to verify them.
func (h *workerHead) blockRange(a, b int64) (lo, hi int64) {
	k := int64(h.w.EntryBlock)
	if a == b {
		return a, b
	}
	return a / k * k, min((b+k-1)/k*k, int64(h.count))
}

// verifyEntries checks b, the worker manifest's entries [lo, hi) (whole
// blocks: lo on a block boundary, hi on one or at the end), against the
// header's block checksums.
func (h *workerHead) verifyEntries(what string, b []byte, lo, hi int64) error {
	k := int64(h.w.EntryBlock)
	for i := lo; i < hi; i += k {
		j := min(i+k, hi)
		got, want := crc32c(b[EntrySize*(i-lo):EntrySize*(j-lo)]), blockCRC(h.w.EntryCRCs, i/k)
		if got != want {
			return crcMismatch(what, fmt.Sprintf("entries [%d, %d)", i, j), h.entries+EntrySize*i, h.entries+EntrySize*j, got, want)
		}
	}
	return nil
}
