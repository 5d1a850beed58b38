// Package durashuffle is durable shuffle storage for distributed query
// engines: processing goroutines hand it Arrow record batches tagged with
// an output partition, and it stores them on S3 as fixed-size chunks
// uploaded by a bounded pool, committed by a manifest written last.
//
// This package is the API; the data flows through the packages chunker
// -> uploader -> manifest -> reader, and a store (package store) is
// anything that meets the contract of package storetest:
//
//	cfg := durashuffle.DefaultConfig()         // or cfg.LoadFile(path); every key in docs/configuration.md
//	cfg.Bucket = "shuffle"
//	c, err := durashuffle.Open(ctx, cfg)       // one per process; options: WithStore, WithAWSConfig, ...
//	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q1", Stage: 0, Worker: "0", Partitions: 64})
//	err = w.Write(partition, record)           // from many goroutines
//	m, err := w.Commit(ctx)                    // the worker manifest is the commit point
//	st, err := c.Seal(ctx, "q1", 0, 4)         // once all 4 workers committed
//	stage, err := c.OpenStage(ctx, "q1", 0)    // one GET
//	rr, err := stage.ReadPartitions(ctx, []int{7}) // Next, RecordBatch, Partition, Err, Release
//
// A failed call leaves nothing visible; IsRetryable says whether the task
// may succeed if run again (for a writer: as a new attempt). Package
// embedded runs an in-process S3 server for tests and trials.
package durashuffle
