// Package embedded runs a zero-setup S3 server in-process on loopback,
// backed by a directory, so durashuffle works (and its tests run) with no
// object store installed. It is for trials and tests, not production.
// It is gofakes3 with its filesystem backend, plus small fixes where
// gofakes3 falls short of what durashuffle relies on.
//
// Access: it listens on loopback only (Options.Addr beyond loopback fails
// with ErrNotLoopback) and takes only requests signed (AWS Signature
// Version 4, Authorization header or presigned URL) with its one pair of
// credentials, generated at Start unless Options names them;
// Server.Credentials returns them for its clients. Anything else is
// answered 403 before gofakes3 sees it: AccessDenied unsigned,
// InvalidAccessKeyId, SignatureDoesNotMatch, RequestTimeTooSkewed (more
// than 15 minutes off), or an expired presigned URL. The signature is
// checked by signing the request again with the SDK's own signer. A hex
// x-amz-content-sha256 is checked against the body (400 BadDigest);
// UNSIGNED-PAYLOAD and the STREAMING-* aws-chunked bodies carry no body
// hash, and their chunk signatures are not checked (their headers'
// signature is). Other local users who can reach the port without the keys
// can do nothing; anyone with the keys can do everything.
//
// The fixes (no S3 protocol is written here; failures are gofakes3's own
// error codes, and the one synthesized response uses its result type):
//
//   - x-amz-checksum-crc32c is verified on PutObject and UploadPart
//     (gofakes3 ignores it), answering 400 BadDigest like S3.
//   - aws-chunked bodies that gofakes3 cannot decode (any part upload, and
//     the trailer variants SDKs use over TLS) are refused with 501 instead
//     of being stored still encoded. s3store never sends them: it always
//     sends its checksum as a header.
//   - PutObject bodies are read in full before the backend sees them. The
//     backend writes the object file in place while reading the network,
//     under a lock every request shares, so a cut connection or a bad
//     checksum would leave a torn object (fatal for a manifest committed
//     with If-None-Match) and one slow client would stall all others.
//   - Listing is recomputed from the backend's flat key list. Its
//     directory listing misplaces prefixes that do not end in "/", sorts
//     "a/x" before "a-x", reports the empty directories of deleted keys
//     as common prefixes, and answers NoSuchBucket for a prefix whose
//     directory does not exist.
//   - ListMultipartUploads of a bucket that never had an upload answers an
//     empty list, not 404 NoSuchUpload.
//   - CompleteMultipartUpload that lists its parts out of ascending
//     part-number order is refused with 400 InvalidPartOrder, as S3,
//     MinIO and versitygw refuse it; gofakes3 sorts the numbers before it
//     checks their order, and would assemble the object in the order
//     listed. Part numbers need not be consecutive (1, 5, 10000), on any
//     of them.
//
// What gofakes3 does right, and the contract suite checks: conditional
// put (If-None-Match: * is checked and written under one lock, so racing
// commits get exactly one winner and 412s), ranged GET (416 past the end),
// multipart upload, DeleteObjects, prefix and delimiter listing.
//
// Limits that remain, none of which durashuffle's layout meets: parts are
// held in memory until Complete, which assembles the object in memory too;
// open uploads do not survive a restart and upload IDs restart at 1; a key
// cannot also be a "directory" of another key ("a/b" and "a/b/c"), and
// the parent directories of deleted keys stay on disk; listings ignore
// max-keys and return one page; a reader of a key being overwritten can
// see a torn object; only CRC32C is verified; there is no TLS, and one
// pair of keys with every right.
package embedded
