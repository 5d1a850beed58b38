package arrowipc_test

import (
	"bytes"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"os"
	"path/filepath"
	"testing"
)

// FuzzNativeMessages feeds NativeMessages mutated big-endian IPC streams
// (seeded with Arrow C++'s big-endian integration streams): its parser
// reads untrusted flatbuffers and bodies, so any input must end in
// messages or an error, never a panic.
func FuzzNativeMessages(f *testing.F) {
	seeds, err := filepath.Glob("../../cmd/durashuffle/testdata/bigendian/*.stream")
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no big-endian seed streams: %v", err)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := arrowipc.NativeMessages(bytes.NewReader(b))
		for range 1 << 10 {
			msg, err := rd.Message()
			if err != nil {
				return // io.EOF or a refusal: both fine, a panic is not
			}
			if msg == nil {
				t.Fatal("a nil message without an error")
			}
			if msg.BodyLen() < 0 {
				t.Fatalf("a body of %d bytes", msg.BodyLen())
			}
			msg.Release()
		}
	})
}
