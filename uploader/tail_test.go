package uploader

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/store"
)

const mib = 1 << 20

func repeat(n int, v int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func sum(s []int64) int64 {
	var n int64
	for _, v := range s {
		n += v
	}
	return n
}

// checkCut checks what every cut must be: the tail's bytes, every part
// but the last at least minPart and each at most maxPart or a whole
// chunk, and an end no later than the chunks' own.
func checkCut(t *testing.T, chunks, free, plan []int64, chunk, minPart, maxPart int64) {
	t.Helper()
	if plan == nil {
		return
	}
	if sum(plan) != sum(chunks) {
		t.Fatalf("parts %v hold %d bytes, the tail %d", plan, sum(plan), sum(chunks))
	}
	for i, s := range plan {
		if s < 1 || i < len(plan)-1 && s < minPart || s > maxPart && s != chunk {
			t.Fatalf("part %d of %v: %d bytes, want every part but the last at least %d and at most %d (or a chunk)", i+1, plan, s, minPart, maxPart)
		}
	}
	if finish(plan, free) >= finish(chunks, free) {
		t.Fatalf("parts %v end at %d, the chunks as they are at %d: no gain", plan, finish(plan, free), finish(chunks, free))
	}
}

// TestPlanTail: the tail of an object is cut so that the connections
// that take its parts end together: even parts over idle connections,
// smaller ones for connections free later, none for a connection busy
// past the others' end, whole chunks first past a round of two-chunk
// parts, and no cut where it gains nothing.
func TestPlanTail(t *testing.T) {
	const chunk, minPart, maxPart = 8 * mib, 5 * mib, 16 * mib
	tests := []struct {
		name   string
		chunks []int64
		free   []int64
		chunk  int64
		want   []int64 // nil: the chunks stay the parts
		ends   int     // connections that end together (within a byte)
	}{
		{name: "8 full chunks and 2 MiB over 8 idle connections: 8 parts of 8.25 MiB",
			chunks: append(repeat(8, chunk), 2*mib), free: repeat(8, 0), want: repeat(8, 8*mib+mib/4), ends: 8},
		{name: "the last chunk alone stays one part",
			chunks: []int64{2 * mib}, free: repeat(8, 0)},
		{name: "full chunks over as many idle connections stay",
			chunks: repeat(8, chunk), free: repeat(8, 0)},
		{name: "one connection gains nothing",
			chunks: []int64{chunk, 2 * mib}, free: []int64{0}},
		{name: "10 MiB: two parts of 5 MiB, not more",
			chunks: []int64{chunk, 2 * mib}, free: repeat(8, 0), want: []int64{5 * mib, 5 * mib}, ends: 2},
		{name: "a 64 MiB last chunk over 8 idle connections",
			chunks: []int64{64 * mib}, free: repeat(8, 0), chunk: 64 * mib, want: repeat(8, 8*mib), ends: 8},
		{name: "connections free at different times: the first free takes the largest part",
			chunks: append(repeat(3, chunk), 6*mib), free: []int64{0, 2 * mib, 4 * mib, 12 * mib},
			want: []int64{12 * mib, 10 * mib, 8 * mib}, ends: 3},
		{name: "a connection that just took a part takes none of the tail",
			// The end of bench write: 7 connections about to finish a
			// part, one that has just started its next; 7 chunks and 1.7
			// MiB left.
			chunks: append(repeat(7, chunk), 17*mib/10),
			free:   []int64{chunk, mib / 5, 2 * mib / 5, 3 * mib / 5, 4 * mib / 5, mib, 6 * mib / 5, 7 * mib / 5},
			ends:   7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.chunk
			if c == 0 {
				c = chunk
			}
			plan := planTail(tc.chunks, tc.free, c, minPart, max(maxPart, 2*c))
			if tc.want != nil && !slices.Equal(plan, tc.want) || tc.want == nil && tc.ends == 0 && plan != nil {
				t.Fatalf("plan %v, want %v", plan, tc.want)
			}
			checkCut(t, tc.chunks, tc.free, plan, c, minPart, max(maxPart, 2*c))
			if tc.ends > 0 {
				if len(plan) != tc.ends {
					t.Fatalf("plan %v: %d parts, want %d", plan, len(plan), tc.ends)
				}
				// Part i goes to the i-th connection free.
				f := slices.Sorted(slices.Values(tc.free))
				lo, hi := f[0]+plan[0], f[0]+plan[0]
				for i, s := range plan {
					lo, hi = min(lo, f[i]+s), max(hi, f[i]+s)
				}
				if hi-lo > 1 {
					t.Fatalf("plan %v over connections free at %v: ends from %d to %d, want together", plan, f, lo, hi)
				}
			}
		})
	}

	t.Run("past a round of two-chunk parts, whole chunks go first", func(t *testing.T) {
		chunks := append(repeat(39, chunk), 3*mib)
		free := []int64{0, 0}
		plan := planTail(chunks, free, chunk, minPart, maxPart)
		checkCut(t, chunks, free, plan, chunk, minPart, maxPart)
		if len(plan) < 3 || plan[0] != chunk {
			t.Fatalf("plan %v: want whole chunks, then a last round", plan)
		}
		last := plan[len(plan)-2:]
		if last[0] > maxPart || last[0]-last[1] > 1 {
			t.Fatalf("plan %v: the last round %v is not two even parts of at most %d", plan, last, maxPart)
		}
	})

	t.Run("any tail", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for range 2000 {
			chunks := repeat(1+r.IntN(20), chunk)
			chunks[len(chunks)-1] = 1 + r.Int64N(chunk)
			free := make([]int64, 1+r.IntN(16))
			for i := range free {
				if r.IntN(3) > 0 {
					free[i] = r.Int64N(2 * chunk)
				}
			}
			checkCut(t, chunks, free, planTail(chunks, free, chunk, minPart, maxPart), chunk, minPart, maxPart)
		}
	})
}

// TestFreeAt: a connection's estimate is what is left of the part it
// sends at the recent rate (all of it before a rate is known), idle
// connections are free now, a throttled pool counts only the
// connections of its window, and other objects' queued parts come
// first.
func TestFreeAt(t *testing.T) {
	// No workers: the queue keeps what the test puts in it.
	now := time.Unix(1000, 0)
	p := &Pool{cfg: Config{ChunkSize: mib, Concurrency: 4}, q: newQueue(), lim: newLimiter(4, time.Second),
		now: func() time.Time { return now }}
	o := p.newUpload(context.Background(), "k", nil)
	p.running = map[*part]running{
		{}: {size: mib, start: now},
		{}: {size: mib, start: now.Add(-time.Second / 2)},
	}
	if f := p.freeAt(o); !slices.Equal(f, []int64{0, 0, mib, mib}) {
		t.Fatalf("no rate known: free at %v, want two idle connections and two with a whole part left", f)
	}
	p.rate = mib // a part of 1 MiB takes a second
	if f := p.freeAt(o); !slices.Equal(f, []int64{0, 0, mib / 2, mib}) {
		t.Fatalf("at 1 MiB/s: free at %v, want half a part left of the one started half a second ago", f)
	}
	other := p.newUpload(context.Background(), "other", nil)
	p.q.push(other, 3)
	if f := p.freeAt(o); !slices.Equal(f, []int64{mib, mib, mib, 3 * mib / 2}) {
		t.Fatalf("three chunks of another object queued: free at %v", f)
	}
	p.q.withdraw(other, 3)
	p.Throttled()
	if f := p.freeAt(o); !slices.Equal(f, []int64{mib / 2, mib}) {
		t.Fatalf("throttled to a window of 2: free at %v, want the two connections the window leaves", f)
	}
}

// gated is a streaming in-memory store whose first attempt at each part
// of a key waits at a gate the test opens, so a test sees which parts are
// in flight at once and holds the workers busy at will. It records each
// part's size.
type gated struct {
	*streamingMem
	mu      sync.Mutex
	cond    sync.Cond
	seen    map[string]map[int32]bool
	arrived map[string]int // first attempts that reached the gate
	passes  map[string]int
	open    bool // the test ended: nothing waits
	sizes   map[string]map[int32]int64
}

// newGatedPool returns a pool with cfg on a gated store (wrapped by wrap,
// if set); when the test ends, the gate opens, then the pool closes.
func newGatedPool(t *testing.T, cfg Config, wrap func(*gated) Store) (*Pool, *gated) {
	g := &gated{streamingMem: newStreamingMem(), seen: map[string]map[int32]bool{}, arrived: map[string]int{},
		passes: map[string]int{}, sizes: map[string]map[int32]int64{}}
	g.cond.L = &g.mu
	var st Store = g
	if wrap != nil {
		st = wrap(g)
	}
	p := New(st, cfg, nil)
	t.Cleanup(p.Close)
	t.Cleanup(func() {
		g.mu.Lock()
		g.open = true
		g.mu.Unlock()
		g.cond.Broadcast()
	})
	return p, g
}

func (g *gated) gate(key string, n int32, size int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sizes[key] == nil {
		g.sizes[key], g.seen[key] = map[int32]int64{}, map[int32]bool{}
	}
	g.sizes[key][n] = size
	if g.seen[key][n] {
		return // a retry: through at once
	}
	g.seen[key][n] = true
	g.arrived[key]++
	g.cond.Broadcast()
	for g.passes[key] == 0 && !g.open {
		g.cond.Wait()
	}
	g.passes[key]--
}

// waitFor blocks until n parts of key in all have reached the gate.
func (g *gated) waitFor(key string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.arrived[key] < n {
		g.cond.Wait()
	}
}

// release lets n more parts of key through.
func (g *gated) release(key string, n int) {
	g.mu.Lock()
	g.passes[key] += n
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *gated) partSizes(key string) []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int64, len(g.sizes[key]))
	for n, s := range g.sizes[key] {
		out[n-1] = s
	}
	return out
}

func (g *gated) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	g.gate(key, n, body.Size())
	return g.streamingMem.UploadPart(ctx, key, id, n, body)
}

// tailRun is one object written while every worker is busy with another
// object's part: what was stored, how many rounds its parts took, and
// how the pool and the Keeper ended.
type tailRun struct {
	res    Result
	rounds int
	sizes  []int64
	kept   [][]byte
}

// runTail writes "tail" (data, in chunks of testChunk; by begin and
// grow when begin is set) while the pool's workers each hold a part of
// "busy", then lets the tail's parts through in rounds: each round the
// parts the free workers take at once.
func runTail(t *testing.T, p *Pool, g *gated, data []byte, begin bool) tailRun {
	t.Helper()
	ctx := context.Background()
	workers := p.Config().Concurrency
	busy := p.newUpload(ctx, "busy", nil)
	for i := 1; i <= workers; i++ {
		buf, err := p.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := busy.submit(int32(i), append(buf, pattern(testChunk, byte(i))...), false); err != nil {
			t.Fatal(err)
		}
	}
	g.waitFor("busy", workers)

	o := p.newUpload(ctx, "tail", nil)
	o.keepIn(&budget{max: 1 << 30})
	chunks := (len(data) + testChunk - 1) / testChunk
	for i := 1; i <= chunks; i++ {
		b := data[(i-1)*testChunk : min(i*testChunk, len(data))]
		if begin {
			fill(t, p, o, int32(i), b, 100).finish(i == chunks)
			continue
		}
		buf, err := p.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.submit(int32(i), append(buf, b...), i == chunks); err != nil {
			t.Fatal(err)
		}
	}
	// No worker is free: every part of the tail is ready, none taken.
	o.mu.Lock()
	parts := len(o.ready)
	o.mu.Unlock()

	g.release("busy", workers)
	// A round: the parts the workers take at once. The next part can
	// only reach the gate once one of the round's is through it.
	var run tailRun
	for done := 0; done < parts; run.rounds++ {
		n := min(workers, parts-done)
		g.waitFor("tail", done+n)
		g.release("tail", n)
		done += n
	}
	var err error
	if run.res, err = o.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := busy.Abort(); err != nil {
		t.Fatal(err)
	}
	if got, ok := g.Bytes("tail"); !ok || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (present %v), want the %d bytes written", len(got), ok, len(data))
	}
	run.sizes = g.partSizes("tail")
	chunksKept, _, ok := o.TakeKept()
	if !ok || len(chunksKept) != chunks || !bytes.Equal(bytes.Join(chunksKept, nil), data) {
		t.Fatalf("kept %d chunks (ok %v), want the %d chunks written, in order", len(chunksKept), ok, chunks)
	}
	run.kept = chunksKept
	// Every buffer is back: the pool hands out all of them again.
	if s := p.Stats(); s.Buffered != 0 || s.PeakBuffered > int64(p.Config().MaxBuffered) {
		t.Fatalf("pool stats %+v: want no buffer held and at most %d at once", s, p.Config().MaxBuffered)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var bufs [][]byte
	for range p.Config().MaxBuffered {
		b, err := p.acquire(actx)
		if err != nil {
			t.Fatalf("acquire buffer %d of %d after the upload: %v", len(bufs)+1, p.Config().MaxBuffered, err)
		}
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		p.release(b)
	}
	return run
}

// TestTailRecut: an object of 8 chunks and half of one, handed over
// while all 8 workers are busy, is stored as 8 even parts that the
// workers take in one round (a part spans two chunk buffers), where the
// chunks as they are take two rounds, the second a half chunk alone. The
// stored bytes are the stream's, the chunks kept for a Keeper are the
// chunks written, and every buffer comes back to the pool.
func TestTailRecut(t *testing.T) {
	data := pattern(8*testChunk+testChunk/2, 3)
	cfg := Config{ChunkSize: testChunk, Concurrency: 8, MaxBuffered: 18, Checksum: true,
		MinPartSize: testChunk / 2, CleanupTimeout: time.Second}
	for _, tc := range []struct {
		name  string
		begin bool
	}{{"submitted", false}, {"begun", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p, g := newGatedPool(t, cfg, nil)
			run := runTail(t, p, g, data, tc.begin)
			if run.res.Parts != 8 || run.res.Size != int64(len(data)) || run.rounds != 1 {
				t.Fatalf("result %+v in %d rounds, want 8 parts of %d bytes in 1 round", run.res, run.rounds, len(data))
			}
			if slices.Max(run.sizes)-slices.Min(run.sizes) > 1 || sum(run.sizes) != int64(len(data)) {
				t.Fatalf("part sizes %v, want 8 even parts of %d bytes in all", run.sizes, len(data))
			}
			if n := p.recut.Load(); n != 1 {
				t.Fatalf("%d tails re-cut, want one", n)
			}
			if len(g.attempts) != 8 {
				t.Fatalf("streamed part attempts %v: want the 8 parts spanning two chunks each streamed from them", g.attempts)
			}
		})
	}

	t.Run("parts sent whole: the chunks as they are", func(t *testing.T) {
		whole := cfg
		whole.Checksum = false // no trailer: no part sent from several buffers
		p, g := newGatedPool(t, whole, nil)
		run := runTail(t, p, g, data, false)
		if run.res.Parts != 9 || run.rounds != 2 || run.sizes[8] != testChunk/2 {
			t.Fatalf("result %+v in %d rounds, sizes %v: want 9 chunk parts in 2 rounds", run.res, run.rounds, run.sizes)
		}
		if n := p.recut.Load(); n != 0 {
			t.Fatalf("a pool that does not stream re-cut %d tails", n)
		}
	})

	t.Run("a spanning part that fails is sent again from the same buffers", func(t *testing.T) {
		p, g := newGatedPool(t, cfg, func(g *gated) Store {
			g.failOnce[3] = true
			return retry.Wrap(g, retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, nil)
		})
		// runTail checks that the stored object is the stream: the
		// second attempt sent the part's bytes from the same buffers.
		run := runTail(t, p, g, data, false)
		if run.res.Parts != 8 || g.attempts[3] != 2 || run.sizes[2] != 1088 {
			t.Fatalf("result %+v, attempts %v, sizes %v: want 8 parts of 1088 bytes, part 3 sent twice", run.res, g.attempts, run.sizes)
		}
	})
}
