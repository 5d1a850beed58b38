package sidecar

import "github.com/apache/arrow-go/v18/arrow/memory"

// CheckIPCHeader is checkIPCHeader, for the fuzz target's reference
// decoder, which must refuse what the server refuses before Arrow's
// reader sees it.
var CheckIPCHeader = checkIPCHeader

// NewDecodeAllocator is a decodeAllocator holding at most limit bytes.
func NewDecodeAllocator(limit int64) memory.Allocator {
	return &decodeAllocator{Allocator: memory.DefaultAllocator, limit: limit}
}
