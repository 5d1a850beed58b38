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
