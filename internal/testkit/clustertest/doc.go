// Package clustertest runs durashuffle against a distributed,
// erasure-coded MinIO: four server processes on loopback, one drive each,
// one erasure set (2 data + 2 parity shards, write quorum 3, read quorum
// 2). Its tests kill and restart nodes under a write and a read and check
// what a user would: rows, hashes, exit codes, objects and open uploads.
package clustertest
