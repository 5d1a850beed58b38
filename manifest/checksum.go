package manifest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Checksums of format 3: CRC32C (Castagnoli), as the frames use. Every
// reader verifies the bytes it is about to use against them before it
// trusts one of them; docs/format.md says byte for byte what each covers.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Entry blocks: the entries of a worker manifest and of a stage index
// are checked in blocks of a fixed number of entries, so a reader of a
// range of them verifies the blocks it covers and fetches nothing else.
// The block size is stored with the checksums (entry_block), so a reader
// follows whatever the writer chose.
//
// A stage index block of 1024 entries is 48 KiB: a reader of any
// partition range fetches at most two partial blocks beyond it (under
// 96 KiB), and the stage manifest holds 4 bytes of checksum per block
// (39 KiB at 10 million entries). A worker manifest's block is smaller
// (64 entries, 3 KiB) because seal reads each worker's entries in many
// ranges, one per block of partitions, and pays the partial blocks at
// both ends of each.
const (
	indexEntryBlock  = 1024
	workerEntryBlock = 64
	// maxEntryBlock bounds the entry_block a reader accepts: it reads
	// a whole block into memory to verify it.
	maxEntryBlock = 1 << 16
)

// blocks returns how many checksum blocks n entries make, at least min.
func blocks(n int64, block int, min int64) int64 {
	return max(min, (n+int64(block)-1)/int64(block))
}

// blockCRC returns the i-th CRC of a table of LE u32 checksums.
func blockCRC(t []byte, i int64) uint32 { return binary.LittleEndian.Uint32(t[4*i:]) }

// blockSums computes the CRC32C of each block of entries in b (whole
// entries, block entries each); the first block's CRC starts from seed,
// the CRC of whatever precedes the entries in the first block.
func blockSums(b []byte, block int, seed uint32, minBlocks int64) []byte {
	n := int64(len(b) / EntrySize)
	nb := blocks(n, block, minBlocks)
	out := make([]byte, 4*nb)
	for i := int64(0); i < nb; i++ {
		lo := min(i*int64(block), n) * EntrySize
		hi := min((i+1)*int64(block), n) * EntrySize
		var c uint32
		if i == 0 {
			c = seed
		}
		c = crc32.Update(c, castagnoli, b[lo:hi])
		binary.LittleEndian.PutUint32(out[4*i:], c)
	}
	return out
}

// checkBlockTable verifies that a table of block checksums has one CRC
// per block of n entries.
func checkBlockTable(what string, t []byte, block int, n int64, minBlocks int64) error {
	if block < 1 || block > maxEntryBlock {
		return fmt.Errorf("%w: %s: entry_block %d, want 1 to %d", ErrCorrupt, what, block, maxEntryBlock)
	}
	if want := 4 * blocks(n, block, minBlocks); int64(len(t)) != want {
		return fmt.Errorf("%w: %s: %d bytes of entry checksums, want %d for %d entries in blocks of %d", ErrCorrupt, what, len(t), want, n, block)
	}
	return nil
}

// crcMismatch is the error of a checksum that does not match: it names
// the object, the region and its byte range, and both CRCs.
func crcMismatch(key, region string, off, end int64, got, want uint32) error {
	return fmt.Errorf("%w: %s: %s (bytes [%d, %d)) has CRC32C %08x, want %08x", ErrCorrupt, key, region, off, end, got, want)
}
