package durashuffle

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle/internal/memstore"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/uploader"
)

// fastPath is a client's memory store (memory_store_bytes) and peer
// sidecars: the reads they serve skip the object store, which stays the
// truth for every byte.
type fastPath struct {
	mem   *memstore.Store // nil: memory_store_bytes 0
	self  string          // advertise_addr
	hedge *reader.Hedger  // times Source fetches; nil with hedge_factor 0
	delay time.Duration   // hedge delay before the hedger has samples
	obs   reader.Observer
	peers atomic.Pointer[reader.Source]
}

func (f *fastPath) init(cfg Config, obs Observer) {
	mo, _ := obs.(memstore.Observer)
	f.mem = memstore.New(int64(cfg.Sidecar.MemoryStoreBytes), mo)
	f.self = cfg.Sidecar.AdvertiseAddr
	f.obs, _ = obs.(reader.Observer)
	f.delay = cfg.Hedge.MinDelay.D()
	if cfg.Hedge.Factor > 0 {
		f.hedge = reader.NewHedger(cfg.Hedge.Factor, cfg.Hedge.MinDelay.D())
	}
	if f.delay <= 0 {
		// Never wait on a peer for ever: with hedging off a late peer
		// is still cut short in favour of the store.
		f.delay = 2 * time.Second
	}
}

func (f *fastPath) on() bool { return f.mem != nil || f.peers.Load() != nil }

func (f *fastPath) readerOptions(o *reader.Options) {
	if f.on() {
		o.Source = f
	}
	o.SourceHedge, o.SourceDelay, o.Observer = f.hedge, f.delay, f.obs
}

// Fetch serves a range from the memory store, else from the worker's
// peer sidecar when one is advertised and UsePeers gave a peer client.
func (f *fastPath) Fetch(ctx context.Context, r reader.SourceRange) ([]byte, string, error) {
	if f.mem != nil {
		b, err := f.mem.Read(memstore.Key{Query: r.Query, Stage: r.Stage, Worker: r.Worker, Attempt: r.Attempt}, r.Object, r.Offset, r.Length)
		if err == nil {
			return b, reader.SourceMemory, nil
		}
		if r.Peer != "" && r.Peer == f.self {
			// Committed here and no longer held: evicted or released.
			return nil, "", &reader.SourceError{Reason: reader.FallbackMiss, Err: err}
		}
	}
	if r.Peer == "" {
		return nil, "", reader.ErrNoSource
	}
	p := f.peers.Load()
	if p == nil {
		return nil, "", reader.ErrNoSource
	}
	return (*p).Fetch(ctx, r)
}

// UsePeers makes the client's readers fetch the frames of workers whose
// manifest names a peer sidecar (advertise_addr) from that sidecar, with
// p (a *peer.Client), before the object store. Call it before opening
// stages; nil stops asking peers.
func (c *Client) UsePeers(p reader.Source) {
	if p == nil {
		c.fast.peers.Store(nil)
		return
	}
	c.fast.peers.Store(&p)
}

// keeper is where a writer's data objects keep their uploaded chunks: the
// memory store, or nil.
func (c *Client) keeper() uploader.Keeper {
	if c.fast.mem == nil {
		return nil
	}
	return c.fast.mem
}

// advertise names this sidecar in a worker manifest about to be
// committed when every chunk of its objects is still held.
func (c *Client) advertise(m *manifest.Worker, objs []*uploader.Upload) {
	if c.fast.mem == nil || c.fast.self == "" {
		return
	}
	for _, o := range objs {
		if !o.Keeping() {
			return
		}
	}
	m.Peer = c.fast.self
}

// admit hands a committed worker's kept chunks to the memory store, or
// gives back their reservation when any object was not kept whole.
func (c *Client) admit(m *manifest.Worker, objs []*uploader.Upload) {
	if c.fast.mem == nil {
		return
	}
	var (
		chunks   = make([][][]byte, len(objs))
		sizes    = make([]int64, len(objs))
		reserved int64
		whole    = true
	)
	for i, o := range objs {
		cs, n, ok := o.TakeKept()
		reserved += n
		chunks[i] = cs
		sizes[i] = m.Objects[i].Size
		whole = whole && ok
	}
	k := memstore.Key{Query: m.Query, Stage: m.Stage, Worker: m.Worker, Attempt: m.Attempt}
	if !whole {
		c.fast.mem.Unreserve(reserved, false)
		return
	}
	c.fast.mem.Admit(k, chunks, m.ChunkSize, sizes, reserved)
}
