// Package durashuffle is durable shuffle storage for distributed query
// engines: processing goroutines hand it Arrow record batches tagged with
// an output partition, and it stores them on S3 as fixed-size chunks
// uploaded by a bounded pool, committed by a manifest written last. Open a
// Client per process, a Writer per worker attempt; Seal the stage, then
// read it with OpenStage.
package durashuffle
