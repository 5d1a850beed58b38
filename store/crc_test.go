package store

import "testing"

func TestCRC32CKnownValue(t *testing.T) {
	// RFC 3720 test vector: 32 bytes of zeros.
	if got := CRC32C(make([]byte, 32)); got != 0x8a9136aa {
		t.Fatalf("CRC32C = %#x", got)
	}
	whole := CRC32C([]byte("hello world"))
	if got := UpdateCRC32C(CRC32C([]byte("hello ")), []byte("world")); got != whole {
		t.Fatalf("streamed CRC %#x != %#x", got, whole)
	}
}
