package durashuffle

import (
	"github.com/durashuffle/durashuffle/internal/held"
	"github.com/durashuffle/durashuffle/internal/memstore"
)

// The memory store (memory_store_bytes) holds the objects of workers
// committed through the client, so that readers in this process, and
// peer sidecars asking this one, skip the object store. The object store
// stays the truth for every byte; what the memory store holds may be
// evicted at any time. With memory_store_bytes 0 it holds nothing:
// MemoryRead finds nothing and MemoryRelease releases nothing. The
// methods below are safe for concurrent use.

// HeldWorker is one committed worker attempt whose objects the memory
// store holds, with the bytes they take and whether a reader has read
// them (a worker not yet read is evicted only after every one already
// read). It is the sidecar's flightclient.HeldWorker too.
type HeldWorker = held.Worker

// MemoryRead returns bytes [offset, offset+length) of object (its index
// in the worker manifest's objects) of the committed worker attempt from
// the memory store. The slice may be the held bytes themselves: the
// caller must not modify it. It fails, naming the worker attempt and the
// range, when they are not held.
func (c *Client) MemoryRead(query string, stage int, worker, attempt string, object int, offset, length int64) ([]byte, error) {
	return c.fast.mem.Read(memstore.Key{Query: query, Stage: stage, Worker: worker, Attempt: attempt}, object, offset, length)
}

// MemoryRelease drops every worker of the query's stage (stage < 0: of
// every stage of the query) from the memory store and returns how many
// workers and bytes it dropped.
func (c *Client) MemoryRelease(query string, stage int) (workers int, bytes int64) {
	return c.fast.mem.Release(query, stage)
}

// MemoryHeld returns the memory store's budget (memory_store_bytes), the
// bytes it holds, the bytes reserved for writers uploading now, and the
// workers it holds of the query's stage (stage < 0: of every stage;
// query "": of every query), in no order.
func (c *Client) MemoryHeld(query string, stage int) (budget, held, reserved int64, workers []HeldWorker) {
	m := c.fast.mem
	held, reserved = m.Used()
	for _, h := range m.Holdings(query, stage) {
		workers = append(workers, HeldWorker{Query: h.Key.Query, Stage: h.Key.Stage, Worker: h.Key.Worker, Attempt: h.Key.Attempt, Bytes: h.Bytes, Read: h.Read})
	}
	return m.Max(), held, reserved, workers
}
