package chunker

// crc32cCombine is the CRC32C of a || b from crcA = CRC32C(a), crcB =
// CRC32C(b) and len(b), without reading either: an object's checksum is
// combined from its frames' checksums, which the appender has already
// (each frame's index entry carries one), rather than computed again
// over every byte. zlib's crc32_combine, for the Castagnoli polynomial.
func crc32cCombine(crcA, crcB uint32, lenB int64) uint32 {
	return crcMultModP(crcX2NModP(lenB, 3), crcA) ^ crcB
}

// castagnoliReversed is the CRC32C polynomial, bit-reversed.
const castagnoliReversed = 0x82f63b78

// crcMultModP is a x b modulo the polynomial, in the reflected bit order
// of the CRC (bit 31 is x^0).
func crcMultModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReversed
		} else {
			b >>= 1
		}
	}
	return p
}

// crcX2N[k] is x^(2^k) modulo the polynomial.
var crcX2N = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < 32; k++ {
		p = crcMultModP(p, p)
		t[k] = p
	}
	return t
}()

// crcX2NModP is x^(n x 2^k) modulo the polynomial.
func crcX2NModP(n int64, k uint) uint32 {
	p := uint32(1) << 31 // x^0
	for n != 0 {
		if n&1 != 0 {
			p = crcMultModP(crcX2N[k&31], p)
		}
		n >>= 1
		k++
	}
	return p
}
