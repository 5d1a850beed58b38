// Package spill keeps a writer's sorted runs on local disk until its
// object is written in partition order: a process's spill directory,
// its byte limit shared by every writer of the process, and one
// append-only file per writer.
//
// A process's files live in a directory of its own under the configured
// one, locked while the process runs, so that the next process to open
// the same directory removes what a killed one left behind.
package spill
