// Package held is the one definition of a worker attempt the memory store
// holds, as the library reports it (durashuffle.HeldWorker) and the
// sidecar sends it (flightclient.HeldWorker): both are this type.
package held

// Worker is one committed worker attempt whose objects the memory store
// holds, with the bytes they take and whether a reader has read them (a
// worker not yet read is evicted only after every one already read).
type Worker struct {
	Query   string `json:"query"`
	Stage   int    `json:"stage"`
	Worker  string `json:"worker"`
	Attempt string `json:"attempt"`
	Bytes   int64  `json:"bytes"`
	Read    bool   `json:"read"` // read at least once since admitted
}
