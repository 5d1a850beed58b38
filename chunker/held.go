package chunker

import (
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow"
)

// allocPadding is what Arrow's allocators add to every buffer to align
// it to 64 bytes (GoAllocator allocates size+64 and aligns inside).
const allocPadding = 64

// heldPerLogical is how many bytes rec's buffers occupy in memory per
// logical byte of rec, at least 1: what coalesce_budget is counted in.
//
// Logical bytes undercount what a writer retains: builders hand over
// their spare capacity with the batch (a builder reserved for more rows
// than it got, a string builder its whole reserved data), every buffer
// is padded to 64 bytes, and the Go allocator rounds each to a size
// class. For small pieces these add up to a large share of the logical
// bytes, so a budget counted in logical bytes alone would let the
// writer hold well over it.
//
// The ratio is of rec as a whole, sum of occupied over sum of lengths,
// and is applied to the logical bytes of what is retained. A batch that
// owns its buffers is charged what they occupy; a slice of a caller's
// larger batch (sharing its buffers) is charged its share of them, in
// proportion to the bytes it views: k disjoint slices of one batch add
// up to that batch's buffers once, not k times. A slice is not charged
// for the rest of the buffers it keeps alive: that memory is the
// caller's, and charging it would flush early for nothing.
func heldPerLogical(rec arrow.RecordBatch) float64 {
	var length, occupied int64
	for _, c := range rec.Columns() {
		l, o := dataHeld(c.Data())
		length += l
		occupied += o
	}
	if length == 0 || occupied <= length {
		return 1
	}
	return float64(occupied) / float64(length)
}

// dataHeld sums the lengths of d's buffers and the bytes they occupy,
// children and dictionary included.
func dataHeld(d arrow.ArrayData) (length, occupied int64) {
	for _, b := range d.Buffers() {
		if b == nil || cap(b.Buf()) == 0 {
			continue
		}
		length += int64(b.Len())
		occupied += allocSize(int64(cap(b.Buf())) + allocPadding)
	}
	for _, c := range d.Children() {
		l, o := dataHeld(c)
		length += l
		occupied += o
	}
	// Dictionary() is a typed nil for other types: ask the type first.
	if d.DataType().ID() == arrow.DICTIONARY && d.Dictionary() != nil {
		l, o := dataHeld(d.Dictionary())
		length += l
		occupied += o
	}
	return length, occupied
}

// allocSize approximates the Go allocator's rounding of an n-byte
// allocation: size classes no more than 1/8 apart up to 32 KiB, whole
// 8 KiB pages above. It errs up by a few percent at most.
func allocSize(n int64) int64 {
	switch {
	case n <= 0:
		return 0
	case n <= 256:
		return (n + 15) &^ 15
	case n <= 32<<10:
		step := int64(1) << (bits.Len64(uint64(n-1)) - 4) // 1/16 to 1/8 of n
		return (n + step - 1) &^ (step - 1)
	}
	return (n + 8<<10 - 1) &^ (8<<10 - 1)
}

// objectsHeld estimates the Go objects a retained batch keeps besides its
// buffers: the batch, and per array (column, child, dictionary) its
// array, data and buffer headers. They cost the same whatever the rows,
// so a retained batch of a few rows of a wide schema is mostly these: the
// reason a small batch is copied into the run's arena (copiedUnder)
// rather than retained.
func objectsHeld(rec arrow.RecordBatch) int64 {
	n := int64(128)
	for _, c := range rec.Columns() {
		n += dataObjects(c.Data())
	}
	return n
}

// Per array: the array value and its ArrayData (~200 bytes), plus a
// memory.Buffer header (~64 bytes) per buffer.
func dataObjects(d arrow.ArrayData) int64 {
	n := int64(200 + 64*len(d.Buffers()))
	for _, c := range d.Children() {
		n += dataObjects(c)
	}
	if d.DataType().ID() == arrow.DICTIONARY && d.Dictionary() != nil {
		n += dataObjects(d.Dictionary())
	}
	return n
}
