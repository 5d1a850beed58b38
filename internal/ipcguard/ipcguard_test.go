package ipcguard_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/ipcguard"
	"github.com/durashuffle/durashuffle/internal/testkit/hostile"
)

// The headers of a valid stream pass; a schema claiming 3,000,000,000
// fields is refused before Arrow's reader makes a slice of them.
func TestCheckHeader(t *testing.T) {
	for i, m := range hostile.Messages(hostile.Stream(hostile.Schema, hostile.Good())) {
		if err := ipcguard.CheckHeader(m.Header); err != nil {
			t.Fatalf("message %d of a valid stream: %v", i, err)
		}
	}
	err := ipcguard.CheckHeader(hostile.Messages(hostile.HugeFieldCount())[0].Header)
	if err == nil || !strings.Contains(err.Error(), "3000000000 elements") {
		t.Fatalf("schema of 3,000,000,000 fields: %v, want refused naming the count", err)
	}
	if err := ipcguard.CheckHeader([]byte{1, 2}); err == nil {
		t.Fatal("a 2-byte header passed")
	}
}

// A compressed buffer that says it holds 1 TiB fails the read with the
// allocator's error instead of the process.
func TestAllocatorRefusesCompressionBomb(t *testing.T) {
	r, err := ipc.NewReader(bytes.NewReader(hostile.CompressionBomb()),
		ipc.WithAllocator(ipcguard.NewAllocator(memory.DefaultAllocator, 64<<20, "the test allows")))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if r.Next() {
		t.Fatal("the bomb decoded")
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "more than the 67108864 the test allows") {
		t.Fatalf("read of the bomb: %v", err)
	}
}
