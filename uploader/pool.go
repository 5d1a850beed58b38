package uploader

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle/internal/hedge"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/store"
	"golang.org/x/sync/semaphore"
)

// Config sizes a Pool.
type Config struct {
	ChunkSize   int64 // bytes per part, the capacity of every buffer
	Concurrency int   // parts in flight
	MaxBuffered int   // chunk buffers in memory, queued, filling or in flight
	Checksum    bool  // send a CRC32C with every part and single put
	// HedgeFactor: a part running longer than this times the recent p90
	// part time (and at least HedgeMin) is sent once more, first success
	// wins. 0 disables hedging.
	HedgeFactor float64
	HedgeMin    time.Duration
	// streamAfter is how many bytes part 1 of an object holds before
	// its streamed upload starts (Object.Write), so that an output smaller
	// than that stays one PutObject; 0 means 1 MiB (a frame or two). At
	// most ChunkSize. Tests set it.
	streamAfter int64
	// CleanupTimeout bounds each abort of a failed or aborted object, on
	// a context detached from the caller's (0: DefaultCleanupTimeout).
	// An upload not aborted by then is left to gc.
	CleanupTimeout time.Duration
	// MinPartSize is the smallest part but an object's last that a
	// re-cut tail may have (0: store.MinPartSize, S3's 5 MiB).
	MinPartSize int64
	// MaxPartSize is the largest part of an object uploaded from a file
	// (see section.go; 0: DefaultMaxPartSize), at most store.MaxPartSize:
	// such an object may have at most MaxPartSize x store.MaxParts bytes.
	MaxPartSize int64
}

// defaultStreamAfter is Config.streamAfter when it is 0.
const defaultStreamAfter = 1 << 20

// DefaultCleanupTimeout is Config.CleanupTimeout when it is 0.
const DefaultCleanupTimeout = 20 * time.Second

// Observer receives pool events for metrics. Every method must be cheap
// and safe for concurrent use; a nil Observer is allowed.
type Observer interface {
	Queued(delta int)                      // parts waiting for a worker
	Buffered(bytes int64)                  // bytes held in chunk buffers now
	PartDone(queued, upload time.Duration) // one part or put finished
	Uploaded(bytes int64)                  // bytes stored by a finished part
}

// Store is what the pool needs: writes, and a listing to settle the
// outcome of a request whose answer was lost.
type Store interface {
	store.Writer
	store.Lister
}

// Pool uploads chunks with a fixed number of workers and hands out a fixed
// number of chunk buffers. Safe for concurrent use.
type Pool struct {
	st   Store
	cfg  Config
	obs  Observer
	sem  *semaphore.Weighted
	free chan []byte
	q    *queue
	wg   sync.WaitGroup
	lim  *limiter
	hdg  *hedge.Hedger // nil: no hedging
	// streams: the store uploads parts while their chunks fill, and
	// from several buffers in sequence (a re-cut tail's parts).
	streams bool
	now     func() time.Time

	mu      sync.Mutex
	running map[*part]running // parts being uploaded
	// rate is the recent bytes per second of one connection, over parts
	// sent whole (0: none yet), to tell how much of a part in flight is
	// left when a tail is re-cut.
	rate float64

	held     atomic.Int64 // buffers handed out and not yet returned
	open     atomic.Int64 // uploads neither finished nor aborted
	fromDisk atomic.Int64 // of those, objects whose parts are planned from disk
	peak     atomic.Int64
	inFlight atomic.Int64
	resent   atomic.Int64
	recut    atomic.Int64
	closed   atomic.Bool
}

// running is a part in flight: its size and when it started.
type running struct {
	size  int64
	start time.Time
}

// Stats is a snapshot of the pool.
type Stats struct {
	Buffered     int64 // buffers held now
	PeakBuffered int64 // most buffers held at once since the pool started
	InFlight     int64 // parts being uploaded now
	// Resent counts parts streamed while their chunks filled whose
	// chunk then ended short (an object's last): the streamed request
	// was cut off and the part sent again whole, with its real length.
	Resent int64
}

// New starts a pool with cfg.Concurrency workers writing to st.
func New(st Store, cfg Config, obs Observer) *Pool {
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	if cfg.MaxBuffered < 1 {
		cfg.MaxBuffered = 2 * cfg.Concurrency
	}
	if cfg.CleanupTimeout <= 0 {
		cfg.CleanupTimeout = DefaultCleanupTimeout
	}
	if cfg.streamAfter <= 0 {
		cfg.streamAfter = defaultStreamAfter
	}
	cfg.streamAfter = min(cfg.streamAfter, max(cfg.ChunkSize, 1))
	p := &Pool{
		st:      st,
		cfg:     cfg,
		obs:     obs,
		sem:     semaphore.NewWeighted(int64(cfg.MaxBuffered)),
		free:    make(chan []byte, cfg.MaxBuffered),
		q:       newQueue(),
		lim:     newLimiter(cfg.Concurrency, throttleCooldown),
		now:     time.Now,
		running: map[*part]running{},
	}
	if cfg.HedgeFactor > 0 {
		p.hdg = hedge.New(cfg.HedgeFactor, cfg.HedgeMin)
	}
	// A streamed part's checksum is its trailer: without checksums parts
	// are sent whole, each from one buffer, and tails are not re-cut.
	p.streams = store.StreamsParts(st) && cfg.Checksum
	for range cfg.Concurrency {
		p.wg.Add(1)
		go p.worker()
	}
	return p
}

// throttleCooldown spaces out multiplicative decreases: a burst of
// throttling answers to parts already in flight is one congestion signal.
const throttleCooldown = 500 * time.Millisecond

// Throttled tells the pool the store asked it to slow down (SlowDown,
// 503): the effective concurrency halves, then recovers additively with
// successful parts, always within [1, Concurrency]. Safe for concurrent
// use, from any goroutine (a retry layer's hook); a burst of calls within
// half a second halves it once.
func (p *Pool) Throttled() { p.lim.throttled() }

// Concurrency is the effective number of parts allowed in flight now.
func (p *Pool) Concurrency() int { return p.lim.current() }

// Hedged returns how many part uploads were hedged and how many of those
// the second request won.
func (p *Pool) Hedged() (hedged, won int64) {
	if p.hdg == nil {
		return 0, 0
	}
	return p.hdg.Stats()
}

// hedged runs fn, a request of bytes bytes, under the pool's hedger, if
// any: it is late against recent parts scaled to its size, so a large
// part is not sent twice for being larger than the parts before it.
func (p *Pool) hedged(ctx context.Context, bytes int64, fn func(context.Context) error) error {
	if p.hdg == nil {
		return fn(ctx)
	}
	return p.hdg.DoSized(ctx, bytes, fn)
}

// Config returns the pool's sizing.
func (p *Pool) Config() Config { return p.cfg }

// Close stops the workers after the queued parts. Writers must be done.
func (p *Pool) Close() {
	if p.closed.CompareAndSwap(false, true) {
		p.q.close()
		p.wg.Wait()
	}
}

// Stats returns counters of the pool.
func (p *Pool) Stats() Stats {
	return Stats{Buffered: p.held.Load(), PeakBuffered: p.peak.Load(), InFlight: p.inFlight.Load(), Resent: p.resent.Load()}
}

// acquire returns an empty buffer with capacity ChunkSize, blocking while
// MaxBuffered buffers are held. It fails only when ctx is done.
func (p *Pool) acquire(ctx context.Context) ([]byte, error) {
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return nil, context.Cause(ctx)
	}
	n := p.held.Add(1)
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			break
		}
	}
	if p.obs != nil {
		p.obs.Buffered(n * p.cfg.ChunkSize)
	}
	select {
	case b := <-p.free:
		return b[:0], nil
	default:
		return make([]byte, 0, p.cfg.ChunkSize), nil
	}
}

// release returns a buffer obtained from acquire. Buffers are reused, so
// the caller must not touch b afterwards. Once no buffer is held and no
// upload is open, the pool lets go of its free buffers too (idle): a
// process between stages (a sidecar waiting for the next writer, a job
// reading back what it wrote) does not keep max_buffered_chunks x
// chunk_size of them alive, and the next writer allocates its chunks
// again. A writer between two runs keeps them.
func (p *Pool) release(b []byte) {
	if b == nil {
		return
	}
	select {
	case p.free <- b:
	default:
	}
	n := p.held.Add(-1)
	if n == 0 {
		p.idle()
	}
	if p.obs != nil {
		p.obs.Buffered(n * p.cfg.ChunkSize)
	}
	p.sem.Release(1)
}

// idle drops the free buffers if no buffer is held and no upload open.
func (p *Pool) idle() {
	if p.held.Load() == 0 && p.open.Load() == 0 {
		p.dropFree()
	}
}

// dropFree empties the free list. A buffer an acquire takes meanwhile is
// simply not dropped.
func (p *Pool) dropFree() {
	for {
		select {
		case <-p.free:
		default:
			return
		}
	}
}

// forget returns the budget of a buffer without reusing the buffer: a
// Keeper holds it now, counted against its own budget.
func (p *Pool) forget() {
	n := p.held.Add(-1)
	if p.obs != nil {
		p.obs.Buffered(n * p.cfg.ChunkSize)
	}
	p.sem.Release(1)
}

func (p *Pool) worker() {
	defer p.wg.Done()
	for {
		o, ok := p.q.pop()
		if !ok {
			return
		}
		if p.obs != nil {
			p.obs.Queued(-1)
		}
		p.lim.acquire()
		// The part is the object's next one when a connection is free to
		// send it: a tail re-cut while this entry waited is taken as cut.
		pt := o.claim()
		if pt == nil {
			p.lim.release(false) // the tail was re-cut into fewer parts
			continue
		}
		start := p.begin(pt)
		err := p.run(pt)
		took := p.end(pt, start, err)
		p.lim.release(err == nil)
		if p.obs != nil && err == nil {
			p.obs.PartDone(start.Sub(pt.queued), took)
			p.obs.Uploaded(pt.body.size())
		}
		err = o.settle(pt, err)
		o.partDone(err)
	}
}

// begin records pt as in flight.
func (p *Pool) begin(pt *part) time.Time {
	start := p.now()
	p.mu.Lock()
	p.running[pt] = running{size: pt.body.size(), start: start}
	p.mu.Unlock()
	p.inFlight.Add(1)
	return start
}

// end records pt as done, and its rate when it was sent whole, and
// returns how long it took.
func (p *Pool) end(pt *part, start time.Time, err error) time.Duration {
	took := p.now().Sub(start)
	p.mu.Lock()
	delete(p.running, pt)
	if err == nil && !pt.streamed && took > 0 {
		bps := float64(pt.body.size()) / took.Seconds()
		if p.rate == 0 {
			p.rate = bps
		} else {
			p.rate += (bps - p.rate) / 4
		}
	}
	p.mu.Unlock()
	p.inFlight.Add(-1)
	return took
}

// run sends pt (see Upload.send): a chunk still filling by way of
// sendFilling, which streams it or waits for it. A panic in it (the
// store's, a hedged request's) fails the part like any error, so the
// object aborts its upload and the worker serves the next part, of this
// object or another.
func (p *Pool) run(pt *part) error {
	o := pt.obj
	return safe.Call(func() error {
		if pt.body.fill != nil {
			return o.sendFilling(pt)
		}
		return o.send(o.ctx, pt)
	}, "upload of part %d of %s", pt.n, o.key)
}

// errClosed: a chunk handed to a closed pool.
var errClosed = errors.New("upload pool is closed")
