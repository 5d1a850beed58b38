package reader

import (
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/keys"
)

// Defaults of Options, as in the configuration (read_range_bytes,
// read_span_bytes, read_ahead, read_gap_bytes).
const (
	DefaultRangeBytes = 8 << 20
	DefaultSpanBytes  = 64 << 20
	DefaultReadAhead  = 4
	DefaultGapBytes   = 256 << 10
)

// Sentinel errors. Frame failures arrive as a *FrameError wrapping one of
// ErrChecksum, ErrTruncated or ErrCorrupt.
var (
	// ErrChecksum: a frame's stored bytes do not match the CRC32C in the
	// manifest.
	ErrChecksum = errors.New("frame checksum mismatch")
	// ErrTruncated: a data object ends before a frame the manifest places
	// in it.
	ErrTruncated = errors.New("data object truncated")
	// ErrCorrupt: a frame does not decode as the stage's Arrow data (its
	// compression, its IPC messages or Arrow's validation fail, or it
	// holds another row count than the manifest's).
	ErrCorrupt = frame.ErrCorrupt
	// ErrPartition: a requested partition is not in the stage. It is
	// chunker.ErrPartition, one sentinel for a partition outside the
	// count a writer or a stage has.
	ErrPartition = chunker.ErrPartition
	// ErrKey: the stage is encrypted and no key, or another key, was
	// given; or a key was given for a stage that is not encrypted.
	ErrKey = keys.ErrKey
)

// errClosed is the cancellation cause of a stream its caller closed; it
// is never reported, since the caller asked for it.
var errClosed = errors.New("reader closed")

// Options tune a Stage's reads. The zero value means the defaults.
type Options struct {
	// RangeBytes is the largest range a stream buffers at once (default
	// 8 MiB): reads are planned in ranges of neighbouring frames of up to
	// this size, each landing in a buffer of its size. Larger ranges mean
	// more memory per range in flight; a frame larger than this is still
	// a range of its own.
	RangeBytes int64
	// SpanBytes is the largest ranged GET of ReadPartitions (default 64
	// MiB): consecutive ranges of one object are read through one GET of
	// up to this size, range by range into their own buffers as the
	// window frees them, so a GET's size is not its memory. Larger spans
	// mean fewer requests (a TiB read in 8 MiB GETs is 131,072 of them,
	// in 64 MiB ones 16,384) and the ranges of one object moving on one
	// connection, one after another, rather than ReadAhead at once: a
	// stream reading one object alone gets one connection's rate.
	// RangeBytes or less makes a GET per range, as ReadStored and
	// ReadResults always do.
	SpanBytes int64
	// ReadAhead is the window of ranges a stream holds: in flight,
	// decoded and waiting, or being delivered (default 4). The range being
	// delivered counts, so 1 fetches only when the caller asks and 4 keeps
	// up to 3 GETs in flight while the caller consumes. Stored bytes held
	// are at most ReadAhead x RangeBytes, or one oversized frame alone,
	// whatever the stage's size. A range's frames reach Next as they
	// arrive; decoded frames not yet delivered are at most ReadAhead x
	// RangeBytes logical bytes, besides two of the range being delivered.
	// That decode budget starts at an eighth of it and rises to all of it
	// the first time the caller waits for a frame being decoded or held
	// back by it, so a caller slower than decoding holds an eighth, and a
	// fast one gets the whole budget of frames decoded ahead on other
	// cores.
	ReadAhead int
	// GapBytes: frames separated by at most this many bytes are fetched in
	// one GET, and the gap is read and dropped (default 256 KiB). Negative
	// means only directly adjacent frames share a GET (config
	// read_gap_bytes: 0 maps to -1 here).
	GapBytes int64
	// Mem allocates decoded records (default memory.DefaultAllocator).
	Mem memory.Allocator
	// Hedge, if set, re-issues a ranged GET that runs far longer than its
	// recent peers (hedge_factor times their p90, at least
	// hedge_min_delay), once, and keeps the first complete answer; the
	// other GET is cancelled. A hedged range briefly holds a second
	// buffer of its size, on top of the ReadAhead x RangeBytes above.
	// Share one Hedger among a client's stages: its window of recent
	// latencies is what makes a GET late. nil: no hedging.
	Hedge *Hedger
	// Source, if set, is asked for each range before the store (a memory
	// store, peer sidecars): see Source. Every frame it returns is checked
	// against the manifest's CRC32C; what it does not serve, or serves
	// wrong, is read from the store.
	Source Source
	// SourceHedge times Source fetches: one running longer than its delay
	// (hedge_factor times the recent p90) is hedged by a GET of the same
	// range from the store, and the first complete answer wins. Before it
	// has samples, or when nil, SourceDelay is the delay.
	SourceHedge *Hedger
	// SourceDelay is the hedge delay of a Source fetch while SourceHedge
	// has no samples (0: never hedge then).
	SourceDelay time.Duration
	// Observer counts bytes by source and fallbacks by reason (nil: not
	// counted).
	Observer Observer
	// Key is the root key of the stage's query (32 bytes) when its
	// frames are encrypted: the stage key is derived from it and checked
	// against the manifest's fingerprint before any frame is read. Nil
	// for a stage that is not encrypted; a key for such a stage, or none
	// for an encrypted one, fails with ErrKey naming the stage.
	Key []byte
}

func (o Options) withDefaults() Options {
	if o.RangeBytes <= 0 {
		o.RangeBytes = DefaultRangeBytes
	}
	if o.SpanBytes == 0 {
		o.SpanBytes = DefaultSpanBytes
	}
	if o.ReadAhead <= 0 {
		o.ReadAhead = DefaultReadAhead
	}
	if o.GapBytes == 0 {
		o.GapBytes = DefaultGapBytes
	}
	if o.Mem == nil {
		o.Mem = memory.DefaultAllocator
	}
	return o
}

// FrameError says which frame failed and why. Err wraps ErrChecksum,
// ErrTruncated or ErrCorrupt.
type FrameError struct {
	Key       string // full key of the data object
	Offset    int64  // frame's offset in the object
	Length    int64  // frame's length per the manifest
	Partition int
	Worker    string
	Err       error
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("frame of partition %d at offset %d (%d bytes) of %s (worker %s): %v",
		e.Partition, e.Offset, e.Length, e.Key, e.Worker, e.Err)
}

func (e *FrameError) Unwrap() error { return e.Err }
