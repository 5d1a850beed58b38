// Package chunker turns Arrow record batches tagged with a partition into
// an object byte stream: it coalesces small batches per partition, encodes
// full buffers into frames in parallel while input still arrives, and cuts
// the stream into fixed-size chunks for the uploader, indexing every frame.
package chunker
