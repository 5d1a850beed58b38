// Package manifest is durashuffle's commit point and index: the worker
// manifest written last with a conditional put, and the seal that builds
// a stage's partition-indexed index so a reader of any partition range
// needs two metadata GETs, whatever the stage's size. It also owns the
// object layout and the validation of IDs.
//
// Format 2.0, byte for byte, is in docs/format.md. In short:
//
//   - An index entry is a 48-byte little-endian record: partition,
//     worker, object, CRC32C (u32), offset, length, rows, logical bytes
//     (u64). Frame is its in-memory form, one type for worker manifests,
//     the index and the reader.
//   - A worker manifest ({stage}/worker-{w}/manifest.json, written with
//     If-None-Match: *) is a container: "DSM2", u32 header length, JSON
//     header, (P+1) u32 partition offset table, then the entries sorted
//     by partition (write order within one). The table comes before the
//     entries so seal reads a head without them.
//   - Seal streams the worker manifests into {stage}/index-{seal}.bin:
//     "DSI2", u32 P, all entries sorted by (partition, worker, write
//     order), then a P x 32-byte summary (rows, logical and stored
//     bytes, frames per partition), written after the entries because
//     only the end of the one pass knows it. Then the stage manifest
//     ({stage}/manifest.json, If-None-Match: *: the commit point) names
//     the index, its section offsets and its (P+1) u32 offset table, and
//     holds the workers' headers but no frames.
//   - LoadStage is one GET for a sealed stage; Stage.Frames of a
//     partition range is one ranged GET of the index; Stage.Summary one
//     ranged GET of the summary. Decoders check every length and count
//     against the bytes received and allocate only for bytes that
//     arrived.
//   - A version 1 manifest (JSON with inline frames) is refused with
//     ErrVersion.
package manifest
