// Package demo generates the data set of `durashuffle demo`: a
// deterministic TPC-H lineitem-like table whose row i is a pure function
// of (seed, i), split into per-partition record batches the way a shuffle
// would split them, together with an order-independent digest per
// partition that the read side recomputes from decoded Arrow values.
package demo
