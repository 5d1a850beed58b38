// Package manifest is durashuffle's commit point and index: the worker
// manifest written last with a conditional put, and the seal that builds
// a stage's partition-indexed index so a reader of any partition range
// needs two metadata GETs, whatever the stage's size. It also owns the
// object layout and the validation of IDs.
//
// Format 3.0, byte for byte, is in docs/format.md. In short:
//
//   - An index entry is a 48-byte little-endian record: partition,
//     worker, object, CRC32C (u32), offset, length, rows, logical bytes
//     (u64). Frame is its in-memory form, one type for worker manifests,
//     the index and the reader.
//   - A worker manifest ({stage}/worker-{w}/manifest.json, written with
//     If-None-Match: *) is a container: "DSM3", u32 header length, u32
//     CRC32C of those 8 bytes and the header, JSON header, (P+1) u32
//     partition offset table, then the entries sorted by partition (write
//     order within one). The header holds the CRC32C of the table and of
//     each block of 64 entries. The table comes before the entries so
//     seal reads a head without them.
//   - Seal streams the worker manifests into {stage}/index-{seal}.bin:
//     "DSI3", u32 P, all entries sorted by (partition, worker, write
//     order), then a P x 32-byte summary (rows, logical and stored
//     bytes, frames per partition), written after the entries because
//     only the end of the one pass knows it. Then the stage manifest
//     ({stage}/manifest.json, If-None-Match: *: the commit point) names
//     the index, its section offsets, its (P+1) u32 offset table and the
//     CRC32C of each block of 1024 entries and of the summary, holds the
//     workers' headers but no frames, and ends with its own CRC32C as the
//     JSON object's last member.
//   - LoadStage is one GET for a sealed stage; Stage.Frames of a
//     partition range is one ranged GET of the index (widened to the
//     checksum blocks that hold the range); Stage.Summary one ranged GET
//     of the summary. Every decoder verifies the checksum of the bytes it
//     is about to use before it uses one (ErrCorrupt naming the object,
//     the region and its byte range), then checks every length and count
//     against the bytes received and allocates only for bytes that
//     arrived.
//   - A version 1 or 2 manifest is refused with ErrVersion.
package manifest
