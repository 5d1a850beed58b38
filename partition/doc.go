// Package partition assigns the rows of Arrow record batches to
// partitions by the hash of a key column that docs/partitioning.md states
// byte by byte, so that every worker, in any language, sends the same
// logical value to the same partition however the value is encoded.
// It also selects the rows of each partition from a batch, for every
// Arrow type, as a Writer does when it scatters a batch itself.
package partition
