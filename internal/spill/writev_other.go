//go:build !(darwin || linux || openbsd)

package spill

import "os"

// writeVec writes bufs back to back at off of f, one write each.
func writeVec(f *os.File, bufs [][]byte, off int64) error {
	for _, b := range bufs {
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
