// Package uploader is durashuffle's bounded upload pool: one per process,
// shared by every writer, with a fixed number of parts in flight and a
// fixed number of chunk buffers in memory. Writers block when the buffers
// are spent, so memory does not grow with output size.
//
// A writer's chunker writes its data objects through a Sink, which gives
// out an Object per data object (the chunker's Objects and Object) and
// keeps its Upload; the writer then finishes each Upload, or aborts it.
// The Object alone decides the parts: bytes written fill chunks, each a
// part; sections of files on disk are cut into parts sized by the object
// and by the objects from disk sharing the pool. NewObject makes an
// Object with a pool of its own, for an object written outside a writer
// (a seal's index, a combined object). An Upload is a state machine (open,
// multipart, single, sealed, completing, completed, failed, aborted)
// whose every change goes through one transition function, and every
// part it stores, whether its bytes are a whole chunk, a chunk still
// filling or a piece of a re-cut tail spanning chunks, goes through one
// send path: hedged, retried by the store from its first byte, its
// checksum checked and its ETag recorded for the Complete. A part of
// sections (section.go) is read from disk by every request, holding no
// buffer of the pool.
package uploader
