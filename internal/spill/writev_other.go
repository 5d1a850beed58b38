//go:build !(darwin || linux || openbsd)

package spill

import "io"

// writeVec writes bufs back to back at off of w, one write each.
func writeVec(w io.WriterAt, bufs [][]byte, off int64) error {
	return writeEach(w, bufs, off)
}
