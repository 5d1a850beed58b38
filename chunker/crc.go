package chunker

import "github.com/durashuffle/durashuffle/store"

// crc32cCombine is the CRC32C of a || b from crcA = CRC32C(a), crcB =
// CRC32C(b) and len(b), without reading either: an object's checksum is
// combined from its frames' checksums, which the appender has already
// (each frame's index entry carries one), rather than computed again
// over every byte.
func crc32cCombine(crcA, crcB uint32, lenB int64) uint32 {
	return store.CombineCRC32C(crcA, crcB, lenB)
}
