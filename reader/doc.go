// Package reader streams a committed stage back out of the object store:
// one GET for a sealed stage's manifest and, per read, one ranged GET of
// its index for the partitions read, then ranged GETs that coalesce
// neighbouring frames, prefetched in a bounded window, each frame checked
// against its manifest CRC32C before it is decoded into Arrow records.
// Records always come in the same order, by partition ascending, then by
// worker in manifest order (sorted by worker ID), then frame by frame in
// the order the worker wrote them, so every read of a stage, and every
// page of its results, sees one deterministic stream. With
// Options.Hedge, a ranged GET that runs far longer than its peers is sent
// once more and the first complete answer wins.
package reader
