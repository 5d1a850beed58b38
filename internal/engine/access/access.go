// Package access hands durashuffle's own server (internal/sidecar) and its
// tests the parts of a *durashuffle.Client that the root package keeps
// out of its API: the memory store the sidecar serves peers and its
// release and held actions from, the commit guard's states its metric
// labels, and the upload pool, read hedging and commit guard probes that
// tests watch. The root package sets the
// functions in its init, so they are set in any program that can hold a
// Client.
package access

import (
	"github.com/durashuffle/durashuffle/internal/engine/memstore"
	"github.com/durashuffle/durashuffle/internal/engine/uploader"
)

var (
	// MemStore returns the client's memory store (nil with
	// memory_store_bytes 0). c is a *durashuffle.Client.
	MemStore func(c any) *memstore.Store
	// Pool returns the client's upload pool.
	Pool func(c any) *uploader.Pool
	// ReadHedged returns how many of the ranged GETs of the client's
	// stages were hedged and how many of those the second request won.
	ReadHedged func(c any) (hedged, won int64)
	// GuardProbes returns how many commit guard probes the client sent.
	GuardProbes func(c any) int64
	// GuardStates lists the commit guard's states, for the sidecar's
	// durashuffle_commit_guard metric.
	GuardStates []string
)
