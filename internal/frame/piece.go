package frame

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
)

// A piece is an Accumulator's rows as its column buffers, back to back:
// what a sorted writer spills of a partition's small frame, to be merged
// at Close with the partition's other pieces into one frame. It is no
// frame: no IPC metadata to build or parse, no validation of arrays the
// writer built itself, and AppendPiece copies its buffers into the
// merging accumulator as they are. It lives only in the writer's spill
// file (checked there by a CRC32C), never in an object, so its layout
// is the writer's own: the rows, then per column, depth first, its rows,
// nulls and the lengths of its validity, offset and value buffers as
// uvarints, followed by those buffers.

// errPiece is a piece that does not parse.
var errPiece = errors.New("malformed spill piece")

// PieceSize is the bytes Piece appends for the accumulated rows.
func (a *Accumulator) PieceSize() int {
	n := binary.MaxVarintLen64
	for _, c := range a.cols {
		n += c.pieceSize()
	}
	return n
}

func (c *growCol) pieceSize() int {
	n := 5*binary.MaxVarintLen64 + len(c.valid) + len(c.offs) + len(c.vals)
	for _, k := range c.kids {
		n += k.pieceSize()
	}
	return n
}

// Piece appends the accumulated rows to dst as a piece.
func (a *Accumulator) Piece(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(a.rows))
	for _, c := range a.cols {
		dst = c.piece(dst)
	}
	return dst
}

func (c *growCol) piece(dst []byte) []byte {
	valid := c.valid
	if !c.hasV {
		valid = nil
	}
	for _, v := range [...]int{c.n, c.nulls, len(valid), len(c.offs), len(c.vals)} {
		dst = binary.AppendUvarint(dst, uint64(v))
	}
	dst = append(dst, valid...)
	dst = append(dst, c.offs...)
	dst = append(dst, c.vals...)
	for _, k := range c.kids {
		dst = k.piece(dst)
	}
	return dst
}

// PieceVecs returns the piece Piece would append as slices, for a
// vectored write (spill.File.AppendVec) that copies nothing: its
// uvarints, kept in hdr (grown when too small; returned for the next
// call), and the accumulator's own buffers. The slices are valid until
// the accumulator changes. n is the piece's length.
func (a *Accumulator) PieceVecs(hdr []byte, vecs [][]byte) (_ [][]byte, _ []byte, n int) {
	cols := 0
	for _, c := range a.cols {
		cols += c.count()
	}
	// Every uvarint fits in hdr as it is: slices of it stay valid.
	if need := binary.MaxVarintLen64 * (1 + 5*cols); cap(hdr) < need {
		hdr = make([]byte, 0, need)
	}
	v := pieceVecs{hdr: hdr[:0], vecs: vecs[:0]}
	v.uvarint(a.rows)
	for _, c := range a.cols {
		c.pieceVecs(&v)
	}
	v.flush()
	return v.vecs, v.hdr, v.n
}

// pieceVecs collects a piece's slices: the uvarints not yet handed out
// are hdr[from:].
type pieceVecs struct {
	hdr  []byte
	from int
	vecs [][]byte
	n    int
}

func (v *pieceVecs) uvarint(x int64) { v.hdr = binary.AppendUvarint(v.hdr, uint64(x)) }

func (v *pieceVecs) flush() {
	if len(v.hdr) > v.from {
		v.vecs = append(v.vecs, v.hdr[v.from:len(v.hdr):len(v.hdr)])
		v.n += len(v.hdr) - v.from
		v.from = len(v.hdr)
	}
}

func (v *pieceVecs) buf(b []byte) {
	if len(b) == 0 {
		return
	}
	v.flush()
	v.vecs = append(v.vecs, b)
	v.n += len(b)
}

func (c *growCol) pieceVecs(v *pieceVecs) {
	valid := c.valid
	if !c.hasV {
		valid = nil
	}
	for _, x := range [...]int{c.n, c.nulls, len(valid), len(c.offs), len(c.vals)} {
		v.uvarint(int64(x))
	}
	v.buf(valid)
	v.buf(c.offs)
	v.buf(c.vals)
	for _, k := range c.kids {
		k.pieceVecs(v)
	}
}

// count is the columns c is, its children's included.
func (c *growCol) count() int {
	n := 1
	for _, k := range c.kids {
		n += k.count()
	}
	return n
}

// AppendPiece copies the rows of piece b (made by Piece from an
// accumulator of the same schema) after the accumulated ones. A piece
// that does not parse fails, with the accumulator unchanged.
func (a *Accumulator) AppendPiece(b []byte) error {
	if a.view == nil {
		a.view = a.emptyLike()
	}
	rows, n := binary.Uvarint(b)
	if n <= 0 {
		return errPiece
	}
	b = b[n:]
	var err error
	for _, v := range a.view.cols {
		if b, err = v.load(b, int(rows)); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes past its last column", errPiece, len(b))
	}
	for i, c := range a.cols {
		if int64(len(c.vals)) > maxAccumulated {
			return fmt.Errorf("accumulate column %q: %d bytes held pass the %d-byte bound of one accumulation", a.schema.Field(i).Name, len(c.vals), maxAccumulated)
		}
	}
	for i, c := range a.cols {
		before, used := c.capacity(), c.length()
		c.appendCol(a.view.cols[i])
		a.held += c.capacity() - before
		a.used += c.length() - used
	}
	a.rows += int64(rows)
	return nil
}

func (c *growCol) length() int64 {
	n := int64(len(c.valid) + len(c.vals) + len(c.offs))
	for _, k := range c.kids {
		n += k.length()
	}
	return n
}

// load points c's buffers at the column at the start of b, which must
// hold rows rows, and returns the rest of b. The buffers' lengths are
// checked against the rows, so appendCol reads inside them.
func (c *growCol) load(b []byte, rows int) ([]byte, error) {
	var v [5]int
	for i := range v {
		x, n := binary.Uvarint(b)
		if n <= 0 || x > 1<<40 {
			return nil, errPiece
		}
		v[i], b = int(x), b[n:]
	}
	n, nulls, lv, lo, lx := v[0], v[1], v[2], v[3], v[4]
	if n != rows || nulls > n || lv+lo+lx > len(b) {
		return nil, fmt.Errorf("%w: a column of %d rows (%d nulls, buffers of %d, %d and %d bytes) in a piece of %d rows with %d bytes left", errPiece, n, nulls, lv, lo, lx, rows, len(b))
	}
	c.n, c.nulls, c.hasV = n, nulls, lv > 0
	c.valid, b = b[:lv:lv], b[lv:]
	c.offs, b = b[:lo:lo], b[lo:]
	c.vals, b = b[:lx:lx], b[lx:]
	bits := int(bitutil.BytesForBits(int64(n)))
	if c.hasV && lv < bits {
		return nil, fmt.Errorf("%w: a validity bitmap of %d bytes for %d rows", errPiece, lv, n)
	}
	kidRows := n
	switch c.id {
	case arrow.NULL:
	case arrow.BOOL:
		if lx < bits {
			return nil, fmt.Errorf("%w: %d bytes of booleans for %d rows", errPiece, lx, n)
		}
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY, arrow.LIST, arrow.MAP, arrow.LARGE_LIST:
		if n > 0 && lo != (n+1)*c.width || n == 0 && lo != 0 {
			return nil, fmt.Errorf("%w: %d bytes of offsets for %d rows", errPiece, lo, n)
		}
		if n > 0 {
			first, last := c.offset(0), c.offset(n)
			if first != 0 || last < 0 {
				return nil, fmt.Errorf("%w: offsets from %d to %d", errPiece, first, last)
			}
			for i := 1; i <= n; i++ {
				if c.offset(i) < c.offset(i-1) {
					return nil, fmt.Errorf("%w: offsets not ascending", errPiece)
				}
			}
			kidRows = last
		} else {
			kidRows = 0
		}
		if len(c.kids) == 0 && kidRows != lx {
			return nil, fmt.Errorf("%w: offsets end at %d, values hold %d bytes", errPiece, kidRows, lx)
		}
	case arrow.FIXED_SIZE_LIST:
		kidRows = n * c.fsl
	case arrow.STRUCT:
	default:
		if lx != n*c.width {
			return nil, fmt.Errorf("%w: %d bytes of values for %d rows of %d bytes", errPiece, lx, n, c.width)
		}
	}
	var err error
	for _, k := range c.kids {
		if b, err = k.load(b, kidRows); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// offset is the i-th offset of c's offsets buffer.
func (c *growCol) offset(i int) int {
	if c.width == 4 {
		return int(int32(binary.LittleEndian.Uint32(c.offs[4*i:])))
	}
	return int(int64(binary.LittleEndian.Uint64(c.offs[8*i:])))
}

// appendCol copies every row of s (a column of the same type whose
// buffers load checked) after c's rows.
func (c *growCol) appendCol(s *growCol) {
	if s.n == 0 {
		return
	}
	if s.hasV || c.hasV {
		if !c.hasV {
			c.valid = growBits(c.valid[:0], 0, c.n+s.n)
			bitutil.SetBitsTo(c.valid, 0, int64(c.n), true)
			c.hasV = true
		} else {
			c.valid = growBits(c.valid, c.n, c.n+s.n)
		}
		if s.hasV {
			bitutil.CopyBitmap(s.valid, 0, s.n, c.valid, c.n)
		} else {
			bitutil.SetBitsTo(c.valid, int64(c.n), int64(s.n), true)
		}
	}
	switch c.id {
	case arrow.NULL:
	case arrow.BOOL:
		c.vals = growBits(c.vals, c.n, c.n+s.n)
		bitutil.CopyBitmap(s.vals, 0, s.n, c.vals, c.n)
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		c.appendOffsetsOf(s)
		c.vals = append(c.vals, s.vals...)
	case arrow.LIST, arrow.MAP, arrow.LARGE_LIST:
		c.appendOffsetsOf(s)
		c.kids[0].appendCol(s.kids[0])
	case arrow.FIXED_SIZE_LIST, arrow.STRUCT:
		for i, k := range c.kids {
			k.appendCol(s.kids[i])
		}
	default:
		c.vals = append(c.vals, s.vals...)
	}
	c.n += s.n
	c.nulls += s.nulls
}

// appendOffsetsOf appends s's offsets (which start at 0) rebased to run
// on from c's last. s's buffer lies anywhere in a piece, unaligned: it
// is read a value at a time, not cast.
func (c *growCol) appendOffsetsOf(s *growCol) {
	w := c.width
	if len(c.offs) == 0 {
		c.offs = append(c.offs[:0], make([]byte, w)...) // the leading 0
	}
	start := len(c.offs)
	c.offs = append(c.offs, make([]byte, s.n*w)...)
	if w == 4 {
		end := binary.LittleEndian.Uint32(c.offs[start-4:])
		for i := 1; i <= s.n; i++ {
			binary.LittleEndian.PutUint32(c.offs[start+4*(i-1):], end+binary.LittleEndian.Uint32(s.offs[4*i:]))
		}
		return
	}
	end := binary.LittleEndian.Uint64(c.offs[start-8:])
	for i := 1; i <= s.n; i++ {
		binary.LittleEndian.PutUint64(c.offs[start+8*(i-1):], end+binary.LittleEndian.Uint64(s.offs[8*i:]))
	}
}
