package durashuffle

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// MemoryLimit is the memory_limit key: a size, MemoryLimitAuto ("auto":
// the configuration's own memory bound) or MemoryLimitOff ("off").
type MemoryLimit int64

// The values of memory_limit that are not sizes.
const (
	MemoryLimitAuto MemoryLimit = 0
	MemoryLimitOff  MemoryLimit = -1
)

// minMemoryLimit is the smallest explicit memory_limit: below it the Go
// runtime alone would keep the collector running.
const minMemoryLimit = 32 * MiB

// unmanagedMemory is what memory_limit auto keeps below the memory bound:
// resident memory the Go runtime's soft limit does not govern, so that
// the process's RSS, not only its Go heap, stays within the bound. It
// covers the binary's touched pages (RssFile; the TLS code adds to them
// over HTTPS) and the heap past the limit while the collector marks and
// before the scavenger returns freed pages. Keeping less lets a writer's
// RSS pass the bound; keeping more costs collector CPU for no memory
// (bench memory holds the 4 GiB writer's peak RSS to the bound;
// BENCHMARKS.md and operations.md, "The soft memory limit", have the
// figures).
const unmanagedMemory = 52 * MiB

// runtimeHeadroom is what the memory bound allows beyond the buffers the
// configuration sizes: the Go runtime and its collector's slack, the Arrow
// allocator's padding, HTTP and SDK buffers, the encoders' working
// buffers, the binary's pages.
const runtimeHeadroom = 96 * MiB

func (m MemoryLimit) String() string {
	switch {
	case m == MemoryLimitAuto:
		return "auto"
	case m < 0:
		return "off"
	}
	return Size(m).String()
}

// UnmarshalText implements encoding.TextUnmarshaler: auto, off or a
// size.
func (m *MemoryLimit) UnmarshalText(b []byte) error {
	v := string(b)
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "auto":
		*m = MemoryLimitAuto
		return nil
	case "off":
		*m = MemoryLimitOff
		return nil
	}
	n, err := ParseSize(v)
	if err != nil || n == 0 {
		return fmt.Errorf("memory limit %q: want auto, off or a size such as 512MiB", v)
	}
	*m = MemoryLimit(n)
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (m MemoryLimit) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// MemoryLoad is what one process runs at once; the memory bound scales with it.
type MemoryLoad struct {
	// Writers is the writers open at once, each with its own
	// coalesce_budget of unencoded rows.
	Writers int
	// Readers is the partition streams read at once, each with about
	// read_ahead x read_range_bytes of stored bytes in flight and at most
	// as many logical bytes of frames decoded ahead of its caller.
	Readers int
	// Streams is the sidecar's Flight streams (max_streams): each is a
	// writer or a reader, plus the gRPC message being received or sent.
	Streams int
}

// MemoryBound is what a process running load holds at most:
//
//	max_buffered_chunks x chunk_size                     chunks, shared
//	+ Writers x coalesce_budget                          unencoded rows
//	+ Readers x 2 x read_ahead x read_range_bytes        ranged GETs, frames decoded ahead
//	+ Streams x (max(coalesce_budget, 2 x read_ahead x read_range_bytes)
//	             + max_message_bytes)                    sidecar streams
//	+ memory_store_bytes                                 frames kept for fast reads
//	+ runtimeHeadroom (96 MiB)
//
// With the defaults and one writer: 16 x 8 MiB + 64 MiB + 96 MiB = 288 MiB.
func (c Config) MemoryBound(l MemoryLoad) Size {
	chunks := Size(c.BufferedChunks()) * c.Write.ChunkSize
	read := 2 * Size(c.Read.Ahead) * c.Read.RangeBytes
	stream := max(c.Write.CoalesceBudget, read) + c.Sidecar.MaxMessageBytes
	return chunks + Size(l.Writers)*c.Write.CoalesceBudget + Size(l.Readers)*read + Size(l.Streams)*stream + c.Sidecar.MemoryStoreBytes + runtimeHeadroom
}

// SoftMemoryLimit is the soft memory limit memory_limit asks for a process
// running load: the size given; for auto, MemoryBound(load) less
// unmanagedMemory (236 MiB with the defaults and one writer); 0 for off.
func (c Config) SoftMemoryLimit(l MemoryLoad) Size {
	switch {
	case c.Write.MemoryLimit == MemoryLimitAuto:
		return c.MemoryBound(l) - unmanagedMemory
	case c.Write.MemoryLimit < 0:
		return 0
	}
	return Size(c.Write.MemoryLimit)
}

// ApplyMemoryLimit sets the process's soft memory limit
// (runtime/debug.SetMemoryLimit) to SoftMemoryLimit(load), unless
// GOMEMLIMIT is set in the environment (getenv): the runtime applied that
// at start, and an operator's explicit limit wins over the configuration.
// It returns the process's soft memory limit now (0: none) and where it
// came from: "memory_limit", "memory_limit auto", "GOMEMLIMIT" or "off"
// (memory_limit off leaves the process's limit as it was).
//
// It changes the whole process, so only a program's main should call it,
// once, for a process whose memory is mostly durashuffle's; the library
// never does.
func (c Config) ApplyMemoryLimit(l MemoryLoad, getenv func(string) string) (limit Size, source string) {
	if getenv("GOMEMLIMIT") != "" {
		return currentMemoryLimit(), "GOMEMLIMIT"
	}
	lim := c.SoftMemoryLimit(l)
	if lim <= 0 {
		return currentMemoryLimit(), "off"
	}
	debug.SetMemoryLimit(int64(lim))
	if c.Write.MemoryLimit == MemoryLimitAuto {
		return lim, "memory_limit auto"
	}
	return lim, "memory_limit"
}

// currentMemoryLimit reads the process's soft memory limit; none
// (math.MaxInt64) is 0.
func currentMemoryLimit() Size {
	n := debug.SetMemoryLimit(-1)
	if n == 1<<63-1 {
		return 0
	}
	return Size(n)
}
