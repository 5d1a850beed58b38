package store

import "hash/crc32"

// CRC32CTable is the Castagnoli table: the checksum of UploadPart's and
// Put's CRC32C, of S3's x-amz-checksum-crc32c and of the manifest's
// frames and objects. It is the only one in durashuffle; build no other.
var CRC32CTable = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the Castagnoli CRC of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, CRC32CTable) }

// UpdateCRC32C extends crc, the CRC32C of the bytes so far, with b.
func UpdateCRC32C(crc uint32, b []byte) uint32 { return crc32.Update(crc, CRC32CTable, b) }

// CombineCRC32C is the CRC32C of a || b from crcA = CRC32C(a), crcB =
// CRC32C(b) and lenB = len(b), without reading either: an object's
// checksum combined from its pieces' (the chunker's frames, a composed
// object's parts). zlib's crc32_combine, for the Castagnoli polynomial.
func CombineCRC32C(crcA, crcB uint32, lenB int64) uint32 {
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
