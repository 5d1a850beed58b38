// Package uploader is durashuffle's bounded upload pool: one per process,
// shared by every writer, with a fixed number of parts in flight and a
// fixed number of chunk buffers in memory. Writers block when the buffers
// are spent, so memory does not grow with output size.
//
// A writer hands its chunks to the pool through a Sink (the chunker's
// sink), which starts an Upload per data object; the writer then
// finishes each Upload, or aborts it. An Upload is a state machine (open,
// multipart, single, sealed, completing, completed, failed, aborted)
// whose every change goes through one transition function, and every
// part it stores, whether its bytes are a whole chunk, a chunk still
// filling or a piece of a re-cut tail spanning chunks, goes through one
// send path: hedged, retried by the store from its first byte, its
// checksum checked and its ETag recorded for the Complete. A spilled
// writer's object comes as sections of a file instead (section.go): parts
// sized by the object, read from disk by every request, holding no
// buffer of the pool.
package uploader
