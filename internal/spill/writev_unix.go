//go:build darwin || linux || openbsd

package spill

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// iovMax is the most slices one pwritev takes (Linux's IOV_MAX).
const iovMax = 1024

// writeVec writes bufs back to back at off of w: in vectored writes,
// none copied, when w is a file; bufs (the slice, not the bytes) is
// scratch.
func writeVec(w io.WriterAt, bufs [][]byte, off int64) error {
	f, ok := w.(*os.File)
	if !ok {
		return writeEach(w, bufs, off)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			return nil
		}
		batch := bufs[:min(len(bufs), iovMax)]
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			n, werr = unix.Pwritev(int(fd), batch, off)
			return true
		}); err != nil {
			return err
		}
		switch {
		case werr == unix.EINTR:
			continue
		case werr != nil:
			return &os.PathError{Op: "pwritev", Path: f.Name(), Err: werr}
		case n == 0:
			return io.ErrShortWrite
		}
		off += int64(n)
		for n > 0 {
			k := min(n, len(bufs[0]))
			bufs[0] = bufs[0][k:]
			n -= k
			if len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
	}
}
