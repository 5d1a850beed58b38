package chunker

import "github.com/durashuffle/durashuffle/internal/spill"

// Objects gives a Writer the objects it writes, one at a time and in
// order (the first object is number 0 to its keys). The uploader
// implements it: how an object is stored (one put, or parts of what
// size, sent when) is its business alone. Create and Limit are called
// from the Writer's appending goroutine.
type Objects interface {
	// Create starts the writer's next object. size is about its bytes
	// when the writer knows them (a sorted writer does at Close), 0 when
	// not. onDisk says its bytes come as sections of spill files
	// (Object.WriteSection); release, when not nil, lets go of those
	// files, and the object calls it once, when nothing reads them any
	// more (its upload completed or aborted). A failure to create ends
	// the writer.
	Create(size int64, onDisk bool, release func()) (Object, error)
	// Limit is the most bytes an object may hold, its bytes written from
	// memory, or from disk when onDisk: a frame that would take an
	// object past it starts the next.
	Limit(onDisk bool) int64
}

// Object is one object being written: its bytes, in order, then Finish;
// or Abort. Its methods are called from one goroutine at a time; none of
// them is called after Finish or Abort but Abort. An error fails the
// writer.
type Object interface {
	// Write appends p. It copies p into buffers of the uploader's pool,
	// which pass to the uploads as they fill (never copied again), and
	// blocks while the pool's memory bound is spent.
	Write(p []byte) error
	// WriteSection appends bytes already on disk, uploaded from the file
	// without being copied into memory. The file stays readable until
	// the object's release.
	WriteSection(s Section) error
	// Finish says the object's last byte was written. It does not wait
	// for the uploads: the object's owner completes it.
	Finish() error
	// Abort drops what the object holds that is not yet uploading. Its
	// owner aborts the upload.
	Abort()
}

// Section is bytes of a spill file: N bytes from Off, whose CRC32C is
// CRC32C. Check says the bytes were written long before (a kept frame)
// and are checked against CRC32C each time they are read whole, so that
// a file that changed on disk fails the upload rather than stores bad
// bytes.
type Section struct {
	File   *spill.File
	Off, N int64
	CRC32C uint32
	Check  bool
	// What names the bytes in an error ("frame of partition 3"); "":
	// "bytes".
	What string
}
