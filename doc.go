// Package durashuffle is durable shuffle storage for distributed query
// engines: processing goroutines hand it Arrow record batches tagged with
// an output partition, and it stores them on S3 as fixed-size chunks
// uploaded by a bounded pool, committed by a manifest written last.
//
// The data flows through the packages chunker -> uploader -> manifest ->
// reader; this package wires them to a store:
//
//	c, _ := durashuffle.Open(ctx, cfg)              // one per process
//	w, _ := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q1", Stage: 0, Worker: "0", Partitions: 64})
//	w.Write(partition, record)                      // from many goroutines
//	m, _ := w.Commit(ctx)                           // the manifest is the commit point
//	c.Seal(ctx, "q1", 0, 4)                         // once all 4 workers committed
//	st, _ := c.OpenStage(ctx, "q1", 0)              // one GET
//	rr, _ := st.ReadPartitions(ctx, []int{7})       // an array.RecordReader
//
// A failed call leaves nothing visible; IsRetryable says whether the task
// may succeed if run again (for a writer: as a new attempt).
package durashuffle
