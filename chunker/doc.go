// Package chunker turns Arrow record batches tagged with a partition into
// an object byte stream: it buffers rows per partition and, when the
// coalesce budget fills, flushes every partition in partition order as a
// sorted run, encoding its frames in parallel while input still arrives;
// it writes the stream to objects the uploader gives out (Objects),
// indexing every frame.
package chunker
