// Package uploader is durashuffle's bounded upload pool: one per process,
// shared by every writer, with a fixed number of parts in flight and a
// fixed number of chunk buffers in memory. Writers block when the buffers
// are spent, so memory does not grow with output size.
package uploader
