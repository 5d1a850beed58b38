// Package embedded runs a zero-setup S3 server in-process on loopback,
// backed by a directory, so durashuffle works (and its tests run) with no
// object store installed.
// It is gofakes3 with its filesystem backend plus three small fixes:
//
//   - x-amz-checksum-crc32c is verified on PutObject and UploadPart
//     (gofakes3 ignores it), answering 400 BadDigest like S3.
//   - aws-chunked bodies that gofakes3 cannot decode (any part upload, and
//     the trailer variants the SDKs use over TLS) are refused with 501
//     instead of being stored encoded. s3store never sends them.
//   - PutObject bodies are read in full before the backend sees them: the
//     backend writes the object file in place while reading the network,
//     under a lock shared by every request, so a cut connection or a bad
//     checksum would leave a torn object, and one slow client would stall
//     all others. Listing is recomputed from the flat key list, because the
//     backend's directory listing misplaces prefixes not ending in "/",
//     sorts "a/x" before "a-x", reports empty directories of deleted keys
//     as common prefixes, and fails with NoSuchBucket for a prefix whose
//     directory does not exist.
//
// Limits that remain (none matter to durashuffle's layout): multipart
// parts are held in memory until Complete (which assembles the object in
// memory too) and open uploads do not survive a restart; upload IDs restart
// at 1; a key cannot also be a "directory" of another key ("a/b" and
// "a/b/c"), and parent directories of deleted keys stay on disk; listings
// ignore max-keys and return everything in one page; concurrent readers of
// a key being overwritten can see a torn object; only CRC32C checksums are
// verified.
package embedded
