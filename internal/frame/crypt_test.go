package frame

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func sealedFrame(t *testing.T, s *Sealer, partition int) (plain, sealed []byte) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.BinaryTypes.String}}, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(`[{"v": "secret-value-one"}, {"v": "secret-value-two"}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var buf bytes.Buffer
	buf.WriteString("prefix") // a frame appended after other bytes
	if _, err := Encode(&buf, schema, []arrow.RecordBatch{rec}, None, nil); err != nil {
		t.Fatal(err)
	}
	plain = append([]byte(nil), buf.Bytes()[6:]...)
	if err := s.Seal(&buf, 6, partition); err != nil {
		t.Fatal(err)
	}
	if string(buf.Bytes()[:6]) != "prefix" {
		t.Fatalf("sealing changed the bytes before the frame")
	}
	return plain, buf.Bytes()[6:]
}

func TestSealedFrameOpensOnlyInItsPlace(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	id := [WriteIDSize]byte{1, 2, 3, 4, 5, 6, 7, 8}
	s, err := NewSealer(key, "q", 3, "w0", "a1", id)
	if err != nil {
		t.Fatal(err)
	}
	plain, sealed := sealedFrame(t, s, 5)
	if len(sealed) != len(plain)+Overhead || !Encrypted(sealed) || Encrypted(plain) {
		t.Fatalf("sealed frame of %d bytes from %d (encrypted %v)", len(sealed), len(plain), Encrypted(sealed))
	}
	if bytes.Contains(sealed, []byte("secret-value")) {
		t.Fatalf("the sealed frame holds the plaintext")
	}
	if WriteID(sealed) != id {
		t.Fatalf("nonce names writer %x, want %x", WriteID(sealed), id)
	}
	o, _ := NewOpener(key, "q", 3)
	got, err := o.Open(sealed, "w0", "a1", 5)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open in its place: %v (equal %v)", err, bytes.Equal(got, plain))
	}
	other, _ := NewOpener(key, "q", 4)
	wrongKey, _ := NewOpener(bytes.Repeat([]byte{8}, KeySize), "q", 3)
	for _, tc := range []struct {
		name string
		o    *Opener
		b    []byte
		w, a string
		p    int
	}{
		{"other partition", o, sealed, "w0", "a1", 6},
		{"other worker", o, sealed, "w1", "a1", 5},
		{"other attempt", o, sealed, "w0", "a2", 5},
		{"other stage", other, sealed, "w0", "a1", 5},
		{"wrong key", wrongKey, sealed, "w0", "a1", 5},
		{"cut tag", o, sealed[:len(sealed)-1], "w0", "a1", 5},
		{"flipped header", o, flip(sealed, 4), "w0", "a1", 5},
		{"flipped nonce", o, flip(sealed, len(sealed)-NonceSize+2), "w0", "a1", 5},
		{"flipped counter", o, flip(sealed, len(sealed)-1), "w0", "a1", 5},
		{"flipped ciphertext", o, flip(sealed, HeaderSize+3), "w0", "a1", 5},
		{"flipped tag", o, flip(sealed, len(sealed)-NonceSize-1), "w0", "a1", 5},
		{"plain frame", o, plain, "w0", "a1", 5},
	} {
		if _, err := tc.o.Open(tc.b, tc.w, tc.a, tc.p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: open gave %v, want ErrCorrupt", tc.name, err)
		}
	}
	// The writer opens its own kept frame where it lies.
	if got, err := s.OpenInPlace(append([]byte(nil), sealed...), 5); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open in place: %v (equal %v)", err, bytes.Equal(got, plain))
	}
	if _, err := s.OpenInPlace(flip(sealed, len(sealed)-NonceSize-3), 5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open in place of a flipped tag: %v", err)
	}
	// The next frame gets the next nonce.
	_, second := sealedFrame(t, s, 5)
	if bytes.Equal(second[len(second)-NonceSize:], sealed[len(sealed)-NonceSize:]) {
		t.Fatalf("two frames of one writer share a nonce")
	}
}

func TestSealedPieceOpens(t *testing.T) {
	key := bytes.Repeat([]byte{9}, KeySize)
	s, _ := NewSealer(key, "q", 0, "0", "a", [WriteIDSize]byte{})
	var buf bytes.Buffer
	buf.WriteString("rows of a piece")
	if err := s.SealPiece(&buf, 0, 2); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte("rows")) {
		t.Fatalf("the sealed piece holds the plaintext")
	}
	if _, err := s.OpenPieceInPlace(append([]byte(nil), buf.Bytes()...), 3); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("piece of partition 2 opened as partition 3's: %v", err)
	}
	// A piece does not open as a frame: the labels differ.
	asFrame := append([]byte{0, flagEncrypted, 0, 0, 0, 0, 0, 0}, buf.Bytes()...)
	if _, err := s.OpenInPlace(asFrame, 2); err == nil {
		t.Fatalf("a piece opened as a frame")
	}
	if got, err := s.OpenPieceInPlace(buf.Bytes(), 2); err != nil || string(got) != "rows of a piece" {
		t.Fatalf("open piece: %q, %v", got, err)
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 1
	return c
}
