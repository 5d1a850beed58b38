// Package entry holds what a worker manifest lists of a worker's output:
// its data objects (Object) and its frames (Frame). The chunker produces
// them and the manifest stores them, one model for both: this package
// sits below the chunker (it imports nothing of durashuffle's) and the
// manifest names its types manifest.Object and manifest.Frame, which is
// how users know them.
package entry

// Object is one data object of a worker attempt.
type Object struct {
	Key    string `json:"key"` // relative to the stage prefix
	Size   int64  `json:"size"`
	Parts  int    `json:"parts"`
	CRC32C uint32 `json:"crc32c"` // of the whole object
}

// Frame is one frame's index entry: where it is and what it holds. On
// disk it is a 48-byte little-endian record (see manifest.EntrySize).
type Frame struct {
	Partition int    `json:"partition"`
	Worker    int    `json:"worker"` // index into the stage's Workers; 0 in a worker manifest
	Object    int    `json:"object"` // index into the worker's Objects
	Offset    int64  `json:"offset"`
	Length    int64  `json:"length"`
	Rows      int64  `json:"rows"`
	Bytes     int64  `json:"bytes"` // uncompressed Arrow bytes
	CRC32C    uint32 `json:"crc32c"`
}
