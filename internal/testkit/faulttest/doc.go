// Package faulttest proves that durashuffle survives a misbehaving object
// store: its tests put internal/testkit/faultproxy between the client and a real
// MinIO server and check that stages still commit and read back whole.
//
// The package has no code outside its tests. The fault matrix runs a few
// seeds in `make test` and DURASHUFFLE_SOAK_RUNS seeds in `make soak`.
package faulttest
