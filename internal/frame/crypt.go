package frame

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// An encrypted frame (docs/format.md, "Encrypted frames") is the frame's
// header with flagEncrypted set in byte 1, the compressed payload sealed
// with AES-256-GCM, the 16-byte tag and the 12-byte nonce:
//
//	header (8) | ciphertext (as long as the payload) | tag (16) | nonce (12)
//
// The nonce goes last so that sealing and opening work where the payload
// lies: GCM writes the ciphertext over the plaintext (and back), and
// nothing is moved to make room.
//
// The additional data binds the frame to its place: the query, the
// stage, the worker and attempt that wrote it, the partition and the
// header itself; the nonce (which GCM authenticates) names the writer
// (its 64-bit write ID) and the frame's number among that writer's
// frames. A frame moved to another query, stage, worker, attempt or
// partition, or with any byte changed, fails to open.
const (
	flagEncrypted byte = 1

	// NonceSize and TagSize are the bytes an encrypted frame adds.
	NonceSize = 12
	TagSize   = 16
	// Overhead is what sealing adds to a frame or a spill piece.
	Overhead = NonceSize + TagSize

	// WriteIDSize is the nonce's prefix: the writer's write ID.
	WriteIDSize = 8

	// KeySize is the AES-256 key size.
	KeySize = 32
)

// Labels keep a frame's additional data apart from a spill piece's: the
// same writer seals both under one key and one nonce sequence.
const (
	labelFrame = "durashuffle frame v1\x00"
	labelPiece = "durashuffle piece v1\x00"
)

// ErrAuth marks a frame or piece whose tag does not verify: changed
// bytes, a wrong key, or a frame moved from another place. It wraps
// ErrCorrupt, so readers refuse it as they refuse a bad CRC32C.
var ErrAuth = fmt.Errorf("%w: authentication failed", ErrCorrupt)

// Encrypted reports whether the frame in b says it is encrypted.
func Encrypted(b []byte) bool {
	return len(b) >= HeaderSize && b[1]&flagEncrypted != 0
}

// WriteID returns the write ID in the nonce of the encrypted frame b
// (zeros when b is too short to hold a header, tag and nonce).
func WriteID(b []byte) (id [WriteIDSize]byte) {
	if len(b) >= HeaderSize+Overhead {
		copy(id[:], b[len(b)-NonceSize:])
	}
	return id
}

// Sealer encrypts the frames and spill pieces of one writer: one stage
// key, one write ID as every nonce's prefix, one counter. Its own nonces
// never repeat: the counter is the writer's, shared by its encoders, and
// refuses to wrap. Another writer of the stage has another random 64-bit
// write ID, so two writers share nonces only if they drew the same one
// (docs/format.md gives the odds). Safe for concurrent use.
type Sealer struct {
	aead  cipher.AEAD
	place []byte // the additional data up to the partition
	id    [WriteIDSize]byte
	next  atomic.Uint64
}

// NewSealer returns the sealer of one writer of worker's attempt of
// query's stage under key (KeySize bytes), its nonces prefixed by the
// writer's write ID.
func NewSealer(key []byte, query string, stage int, worker, attempt string, writeID [WriteIDSize]byte) (*Sealer, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead, place: writerPlace(placeOf(query, stage), worker, attempt), id: writeID}, nil
}

// OpenInPlace opens a frame s sealed, decrypting it where it lies: the
// plain frame it returns is b's own bytes (b is the caller's to spend:
// a sorted writer's kept frame read back to be merged).
func (s *Sealer) OpenInPlace(b []byte, partition int) ([]byte, error) {
	if len(b) < HeaderSize+Overhead || b[1] != flagEncrypted {
		return nil, fmt.Errorf("%w: a kept frame of %d bytes is not sealed", ErrCorrupt, len(b))
	}
	ad := additional(s.place, labelFrame, partition, b[:HeaderSize])
	nonce, ct := b[len(b)-NonceSize:], b[HeaderSize:len(b)-NonceSize]
	plain, err := s.aead.Open(ct[:0], nonce, ct, ad)
	if err != nil {
		return nil, ErrAuth
	}
	b[1] = 0
	return b[:HeaderSize+len(plain)], nil
}

// OpenPieceInPlace opens a spill piece s sealed where it lies, as
// OpenInPlace does a frame.
func (s *Sealer) OpenPieceInPlace(b []byte, partition int) ([]byte, error) {
	if len(b) < Overhead {
		return nil, fmt.Errorf("%w: a sealed piece of %d bytes is shorter than its nonce and tag", ErrCorrupt, len(b))
	}
	nonce, ct := b[len(b)-NonceSize:], b[:len(b)-NonceSize]
	plain, err := s.aead.Open(ct[:0], nonce, ct, additional(s.place, labelPiece, partition, nil))
	if err != nil {
		return nil, ErrAuth
	}
	return plain, nil
}

// Seal encrypts the frame at buf[start:] (one frame, as Encode appends
// it) of partition where it lies, and appends the tag and the nonce.
func (s *Sealer) Seal(buf *bytes.Buffer, start, partition int) error {
	b := buf.Bytes()
	if len(b)-start < HeaderSize {
		return fmt.Errorf("seal a frame of %d bytes: shorter than its header", len(b)-start)
	}
	if b[start+1] != 0 {
		return fmt.Errorf("seal a frame of partition %d: header byte 1 is %d, the frame is sealed already", partition, b[start+1])
	}
	b[start+1] = flagEncrypted
	return s.seal(buf, start, HeaderSize, labelFrame, partition)
}

// SealPiece encrypts the spill piece at buf[start:] of partition where
// it lies, and appends the tag and the nonce.
func (s *Sealer) SealPiece(buf *bytes.Buffer, start, partition int) error {
	return s.seal(buf, start, 0, labelPiece, partition)
}

// seal encrypts the frame at buf[start:] after its first head bytes,
// which go into the additional data, over its own bytes (GCM's in-place
// form), then appends the tag and the nonce.
func (s *Sealer) seal(buf *bytes.Buffer, start, head int, label string, partition int) error {
	n := s.next.Add(1) - 1
	if n > 1<<32-1 {
		return fmt.Errorf("seal a frame of partition %d: the writer sealed 2^32 frames, its nonces are spent", partition)
	}
	GrowTo(buf, Overhead)
	b := buf.Bytes()[start:]
	plain := b[head:]
	// The nonce is written where it will stay, past the tag's room.
	nonce := b[len(b)+TagSize : len(b)+Overhead]
	copy(nonce, s.id[:])
	binary.BigEndian.PutUint32(nonce[WriteIDSize:], uint32(n))
	s.aead.Seal(plain[:0], nonce, plain, additional(s.place, label, partition, b[:head]))
	buf.Write(buf.AvailableBuffer()[:Overhead]) // keep the tag and the nonce
	return nil
}

// Opener decrypts the frames and spill pieces of one stage. Safe for
// concurrent use.
type Opener struct {
	aead  cipher.AEAD
	place []byte
}

// NewOpener returns an opener of query's stage under key.
func NewOpener(key []byte, query string, stage int) (*Opener, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	return &Opener{aead: aead, place: placeOf(query, stage)}, nil
}

// Open checks and decrypts the encrypted frame b, written by worker's
// attempt, of partition into a new buffer holding the plain frame (its
// header with the flag cleared, then the payload), for Decoder.Decode.
// b is not modified. A frame that is not encrypted, or whose tag does
// not verify, fails with ErrCorrupt.
func (o *Opener) Open(b []byte, worker, attempt string, partition int) ([]byte, error) {
	return o.OpenTo(nil, b, worker, attempt, partition)
}

// OpenTo is Open writing the plain frame into dst's memory when it has
// room (dst[:0]), else into a new buffer.
func (o *Opener) OpenTo(dst, b []byte, worker, attempt string, partition int) ([]byte, error) {
	if len(b) < HeaderSize+Overhead {
		return nil, fmt.Errorf("%w: an encrypted frame of %d bytes is shorter than its header, nonce and tag (%d)", ErrCorrupt, len(b), HeaderSize+Overhead)
	}
	if b[1] != flagEncrypted {
		return nil, fmt.Errorf("%w: frame header byte 1 is %d: the frame is not encrypted, and the stage is", ErrCorrupt, b[1])
	}
	out := dst[:0]
	if cap(out) < len(b)-Overhead {
		out = make([]byte, 0, len(b)-Overhead)
	}
	out = append(out, b[:HeaderSize]...)
	out[1] = 0
	nonce, ct := b[len(b)-NonceSize:], b[HeaderSize:len(b)-NonceSize]
	out, err := o.aead.Open(out, nonce, ct, additional(writerPlace(o.place, worker, attempt), labelFrame, partition, b[:HeaderSize]))
	if err != nil {
		return nil, ErrAuth
	}
	return out, nil
}

// OpenPiece checks and decrypts the sealed spill piece b, written by
// worker's attempt, of partition into a new buffer.
func (o *Opener) OpenPiece(b []byte, worker, attempt string, partition int) ([]byte, error) {
	if len(b) < Overhead {
		return nil, fmt.Errorf("%w: a sealed piece of %d bytes is shorter than its nonce and tag", ErrCorrupt, len(b))
	}
	out, err := o.aead.Open(nil, b[len(b)-NonceSize:], b[:len(b)-NonceSize], additional(writerPlace(o.place, worker, attempt), labelPiece, partition, nil))
	if err != nil {
		return nil, ErrAuth
	}
	return out, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("frame key of %d bytes: want %d (AES-256)", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// placeOf is the stage's part of the additional data: the query's
// length (u32 LE) and bytes, then the stage (u32 LE).
func placeOf(query string, stage int) []byte {
	p := binary.LittleEndian.AppendUint32(nil, uint32(len(query)))
	p = append(p, query...)
	return binary.LittleEndian.AppendUint32(p, uint32(stage))
}

// writerPlace appends a writer's worker and attempt to a stage's place,
// each as its length (u32 LE) and bytes.
func writerPlace(place []byte, worker, attempt string) []byte {
	p := append([]byte(nil), place...)
	p = binary.LittleEndian.AppendUint32(p, uint32(len(worker)))
	p = append(p, worker...)
	p = binary.LittleEndian.AppendUint32(p, uint32(len(attempt)))
	return append(p, attempt...)
}

// additional is a frame's additional data: label, place, partition (u32
// LE), then the frame's header (none for a piece).
func additional(place []byte, label string, partition int, header []byte) []byte {
	ad := make([]byte, 0, len(label)+len(place)+4+len(header))
	ad = append(ad, label...)
	ad = append(ad, place...)
	ad = binary.LittleEndian.AppendUint32(ad, uint32(partition))
	return append(ad, header...)
}
