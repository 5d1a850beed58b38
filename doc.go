// Package durashuffle is durable shuffle storage for distributed query
// engines: processing goroutines hand it Arrow record batches tagged with
// an output partition, and it stores them on S3 as fixed-size chunks
// uploaded by a bounded pool, committed by a manifest written last.
//
// Open a Client per process (DefaultConfig, then WithStore, WithCredentials
// and the other options); per worker attempt, NewWriter, Write from any
// goroutine and Commit; Seal the stage once its workers committed, and
// OpenStage to read its partitions (package reader). A failed call leaves
// nothing visible, and IsRetryable says whether the task may succeed if
// run again. A store is anything that passes package storetest; package
// embedded is an in-process S3 server for tests and trials.
package durashuffle
