package sidecar

import "github.com/apache/arrow-go/v18/arrow/memory"

// SetTestHook makes every handler call f at its hook points ("DoPut.batch"
// before each batch is written, "DoGet.batch" before each batch is sent,
// "DoAction" at the start), so a test can play a bug there: a panic, or a
// call that blocks. The returned func removes it.
func SetTestHook(f func(point string)) (restore func()) {
	testHook.Store(&f)
	return func() { testHook.Store(nil) }
}

// CheckIPCHeader is checkIPCHeader, for the fuzz target's reference
// decoder, which must refuse what the server refuses before Arrow's
// reader sees it.
var CheckIPCHeader = checkIPCHeader

// NewDecodeAllocator is a decodeAllocator holding at most limit bytes.
func NewDecodeAllocator(limit int64) memory.Allocator {
	return &decodeAllocator{Allocator: memory.DefaultAllocator, limit: limit}
}
