package frame

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestPieceEveryType: rows gathered into an accumulator, written as
// pieces and appended back from them (into an accumulator that holds
// rows already, and into an empty one) are the rows appended directly,
// column for column and through an encoded frame byte for byte; a piece
// cut short or changed in its lengths fails and leaves the accumulator
// unchanged.
func TestPieceEveryType(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	types := arrow.NewSchema(concatTypes.Fields()[:concatTypes.NumFields()-2], nil)
	for _, nullEvery := range []int{0, 3, 1} {
		a := randomBatch(t, mem, types, 257, uint64(nullEvery)+11, nullEvery)
		direct, _ := NewAccumulator(types)
		merged, _ := NewAccumulator(types)
		gather, _ := NewAccumulator(types)
		var pieces [][]byte
		var hdr []byte
		// Pieces of 1 to 60 rows, and one of none.
		for lo, n := int64(0), int64(1); lo < a.NumRows(); lo, n = lo+n, n%60+7 {
			s := a.NewSlice(lo, min(lo+n, a.NumRows()))
			if err := direct.Append(s); err != nil {
				t.Fatal(err)
			}
			gather.Reset()
			if err := gather.Append(s); err != nil {
				t.Fatal(err)
			}
			s.Release()
			p := gather.Piece(nil)
			if len(p) > gather.PieceSize() {
				t.Fatalf("a piece of %d bytes, PieceSize said %d", len(p), gather.PieceSize())
			}
			var vecs [][]byte
			var n int
			vecs, hdr, n = gather.PieceVecs(hdr, vecs)
			if joined := bytes.Join(vecs, nil); n != len(p) || !bytes.Equal(joined, p) {
				t.Fatalf("PieceVecs: %d bytes (%d said) in %d slices; Piece: %d bytes", len(joined), n, len(vecs), len(p))
			}
			pieces = append(pieces, p)
		}
		gather.Reset()
		pieces = append(pieces, gather.Piece(nil))
		for _, p := range pieces {
			if err := merged.AppendPiece(p); err != nil {
				t.Fatal(err)
			}
		}
		want, got := direct.View(), merged.View()
		if merged.Held() != func() (n int64) {
			for _, c := range merged.cols {
				n += c.capacity()
			}
			return n
		}() {
			t.Fatalf("Held %d is not the buffers' capacity", merged.Held())
		}
		for i := range types.NumFields() {
			if err := array.ValidateFull(got.Column(i)); err != nil {
				t.Fatalf("nulls every %d, column %q: %v", nullEvery, types.Field(i).Name, err)
			}
			if !array.Equal(got.Column(i), want.Column(i)) {
				t.Fatalf("nulls every %d, column %q differs from the rows appended directly", nullEvery, types.Field(i).Name)
			}
		}
		var wb, gb bytes.Buffer
		if _, err := Encode(&wb, types, []arrow.RecordBatch{want}, LZ4, mem); err != nil {
			t.Fatal(err)
		}
		if _, err := Encode(&gb, types, []arrow.RecordBatch{got}, LZ4, mem); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wb.Bytes(), gb.Bytes()) {
			t.Fatalf("nulls every %d: the frame of the pieces' rows differs from the frame of the rows (%d and %d bytes)", nullEvery, gb.Len(), wb.Len())
		}
		want.Release()
		got.Release()
		// Broken pieces: cut at every length, and a length byte changed.
		rows, held := merged.Rows(), merged.Held()
		p := pieces[3]
		for cut := range len(p) {
			if err := merged.AppendPiece(p[:cut]); !errors.Is(err, errPiece) {
				t.Fatalf("a piece cut to %d of %d bytes: %v, want errPiece", cut, len(p), err)
			}
		}
		bad := append([]byte(nil), p...)
		bad[1]++ // the first column's rows
		if err := merged.AppendPiece(bad); !errors.Is(err, errPiece) {
			t.Fatalf("a piece with a column's rows changed: %v, want errPiece", err)
		}
		if merged.Rows() != rows || merged.Held() != held {
			t.Fatalf("a failed AppendPiece changed the accumulator: %d rows, %d held; was %d, %d", merged.Rows(), merged.Held(), rows, held)
		}
		a.Release()
	}
}
