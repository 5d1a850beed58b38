package durashuffle

import "github.com/durashuffle/durashuffle/store/memstore"

// What the tests of package durashuffle_test read inside a Client.

// GuardProbes returns how many commit guard probes the client has sent.
func (c *Client) GuardProbes() int64 { return c.CommitGuard().Probes }

// MemStore returns the client's memory store (nil with
// memory_store_bytes 0).
func (c *Client) MemStore() *memstore.Store { return c.fast.mem }
