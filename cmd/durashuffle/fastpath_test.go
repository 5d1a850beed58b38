package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

// The fast path's fault tests: real sidecar processes on a real MinIO.
// A writes (and holds) a stage, B reads it; whatever goes wrong with A,
// every row arrives exactly once, and the counters say why.

// fastSidecar is one `durashuffle serve` process.
type fastSidecar struct {
	t       *testing.T
	cmd     *exec.Cmd
	flight  string
	metrics string
	token   string
	stderr  *syncBuffer
	fc      *flightclient.Client
}

// startFast starts a sidecar on MinIO with a memory store of memBytes
// and extra flags; advertise is its advertised address ("" for its own
// listen address, "-" for none).
func startFast(t *testing.T, tg target, memBytes, advertise, token string, extra ...string) *fastSidecar {
	t.Helper()
	s := &fastSidecar{t: t, flight: freePort(t), metrics: freePort(t), token: token, stderr: &syncBuffer{}}
	switch advertise {
	case "":
		advertise = s.flight
	case "-":
		advertise = ""
	}
	args := []string{"serve", "--log-format", "json", "--listen", s.flight, "--metrics-listen", s.metrics,
		"--memory-store-bytes", memBytes, "--read-range-bytes", "64KiB", "--read-gap-bytes", "0", "--read-ahead", "2",
		"--hedge-min-delay", "300ms", "--prefix", "fastpath"}
	if advertise != "" {
		args = append(args, "--advertise-addr", advertise)
	}
	args = append(append(args, extra...), tg.flags...)
	s.cmd = exec.Command(bin, args...)
	env := tg.env
	if token != "" {
		env = append(append([]string{}, env...), "DURASHUFFLE_AUTH_TOKEN="+token)
	}
	s.cmd.Env = baseEnv(env)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + s.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 30 s: %v\n%s", err, s.stderr.String())
		}
	}
	fc, err := flightclient.Dial(s.flight, flightclient.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fc.Close() })
	s.fc = fc
	return s
}

// metric sums the samples of name whose label set contains every
// "k=v" of match, from /metrics.
func (s *fastSidecar) metric(name string, match ...string) float64 {
	s.t.Helper()
	v, found := s.metricFound(name, match...)
	if !found {
		s.t.Fatalf("metric %s %v not exported by the sidecar", name, match)
	}
	return v
}

// metricFound is metric for series that appear only once counted.
func (s *fastSidecar) metricFound(name string, match ...string) (float64, bool) {
	s.t.Helper()
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var total float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, name) {
			continue
		}
		series, val, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		all := true
		for _, m := range match {
			k, v, _ := strings.Cut(m, "=")
			if !strings.Contains(series, k+`="`+v+`"`) {
				all = false
			}
		}
		if !all {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			s.t.Fatalf("metric line %q: %v", line, err)
		}
		total += f
		found = true
	}
	return total, found
}

// fallbacks renders the fallback counts by reason, for failure messages.
func (s *fastSidecar) fallbacks() string {
	var b strings.Builder
	for _, r := range []string{"miss", "checksum", "timeout", "refused", "unavailable", "error"} {
		fmt.Fprintf(&b, " %s=%v", r, s.metric("durashuffle_fallbacks_total", "reason="+r))
	}
	return strings.TrimSpace(b.String())
}

// rowID is a lineitem row's key.
type rowID struct {
	order int64
	line  int32
}

// putWorker DoPuts rows [lo, hi) of the demo generator as one worker of
// query's stage 0 and returns their keys.
func (s *fastSidecar) putWorker(ctx context.Context, query string, worker, partitions int, lo, hi int64) (map[rowID]int, error) {
	b, err := demo.NewBatcher(demo.Generator{Seed: 7}, partitions, nil)
	if err != nil {
		return nil, err
	}
	defer b.Release()
	pw, err := s.fc.Put(ctx, flightclient.PutCommand{Query: query, Stage: 0, Worker: flightclient.WorkerID(strconv.Itoa(worker)), Attempt: "a", Partitions: partitions}, demo.Schema())
	if err != nil {
		return nil, err
	}
	defer pw.Abort()
	ids := map[rowID]int{}
	var rows int64
	for _, r := range demo.Chunks(demo.Range{Lo: lo, Hi: hi}, 8192) {
		for _, p := range b.Batch(r, nil) {
			if err == nil {
				addIDs(ids, p.Record)
				err = pw.Write(p.Partition, p.Record)
				rows += p.Record.NumRows()
			}
			p.Record.Release()
		}
		if err != nil {
			return nil, err
		}
	}
	res, err := pw.Commit()
	if err != nil {
		return nil, err
	}
	if !res.Committed || res.Rows != rows {
		return nil, fmt.Errorf("PutResult %+v, sent %d rows", res, rows)
	}
	return ids, nil
}

func addIDs(ids map[rowID]int, rec arrow.RecordBatch) {
	ok := rec.Column(0).(*array.Int64)
	ln := rec.Column(3).(*array.Int32)
	for i := range int(rec.NumRows()) {
		ids[rowID{ok.Value(i), ln.Value(i)}]++
	}
}

// getAll DoGets every partition of query's stage 0 from s. after, if
// set, runs once the first batch has arrived (and the stream is paused).
func (s *fastSidecar) getAll(ctx context.Context, query string, partitions int, after func()) (map[rowID]int, error) {
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	rdr, err := s.fc.Get(ctx, flightclient.Ticket{Query: query, Stage: 0, Partitions: ps})
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	ids := map[rowID]int{}
	first := true
	for rdr.Next() {
		addIDs(ids, rdr.RecordBatch())
		if first && after != nil {
			after()
		}
		first = false
	}
	return ids, rdr.Err()
}

// writeStage has a write two workers of query's stage 0 and seals it.
func writeStage(t *testing.T, ctx context.Context, a *fastSidecar, query string, partitions int, rowsPerWorker int64) map[rowID]int {
	t.Helper()
	want := map[rowID]int{}
	for w := range 2 {
		ids, err := a.putWorker(ctx, query, w, partitions, int64(w)*rowsPerWorker, int64(w+1)*rowsPerWorker)
		if err != nil {
			t.Fatalf("put worker %d: %v\n%s", w, err, a.stderr.String())
		}
		for k, n := range ids {
			want[k] += n
		}
	}
	if _, err := a.fc.Seal(ctx, query, 0, 2); err != nil {
		t.Fatalf("seal: %v", err)
	}
	return want
}

// sameRows fails unless got holds every row of want exactly once.
func sameRows(t *testing.T, got, want map[rowID]int) {
	t.Helper()
	if len(want) == 0 {
		t.Fatal("no rows written")
	}
	var missing, dup, extra int
	for k, n := range want {
		switch g := got[k]; {
		case g == 0:
			missing++
		case g > n:
			dup++
		}
	}
	for k := range got {
		if want[k] == 0 {
			extra++
		}
	}
	if missing+dup+extra > 0 {
		t.Fatalf("rows: %d missing, %d duplicated, %d unknown of %d", missing, dup, extra, len(want))
	}
}

// heldWorkers returns the workers of query's stage 0 that s holds.
func (s *fastSidecar) heldWorkers(ctx context.Context, query string) []string {
	s.t.Helper()
	res, err := s.fc.Held(ctx, query, 0)
	if err != nil {
		s.t.Fatalf("held: %v", err)
	}
	var ws []string
	for _, w := range res.Workers {
		ws = append(ws, w.Worker)
	}
	return ws
}

// dataGets counts the sidecar's GETs of data ranges: every GetObject but
// the stage manifest and index reads.
func (s *fastSidecar) gets() float64 {
	v, _ := s.metricFound("durashuffle_requests_total", "op=GetObject")
	return v
}

func TestFastPathMemoryAndPeer(t *testing.T) {
	tg := newTarget(t, backends[1]) // MinIO
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startFast(t, tg, "256MiB", "", "")
	b := startFast(t, tg, "256MiB", "", "")
	const query, partitions = "fast-ok", 8
	want := writeStage(t, ctx, a, query, partitions, 40_000)
	if got := a.heldWorkers(ctx, query); len(got) != 2 {
		t.Fatalf("a holds workers %v, want 0 and 1", got)
	}
	// inspect shows which workers a sidecar holds, and who advertised them.
	for _, s := range []*fastSidecar{a, b} {
		var out struct {
			Workers []struct {
				Worker string `json:"worker"`
				Peer   string `json:"peer"`
				Held   *bool  `json:"held"`
			} `json:"workers"`
		}
		tg.run(t, nil, "inspect", "--query", query, "--stage", "0", "--prefix", "fastpath", "--sidecar", s.flight, "--json").must(t).decode(t, &out)
		if len(out.Workers) != 2 {
			t.Fatalf("inspect: %d workers", len(out.Workers))
		}
		for _, w := range out.Workers {
			if w.Peer != a.flight || w.Held == nil || *w.Held != (s == a) {
				t.Fatalf("inspect --sidecar %s: worker %s peer %q held %v; want peer %s, held %v", s.flight, w.Worker, w.Peer, w.Held, a.flight, s == a)
			}
		}
	}

	// Co-located: A reads its own workers from memory, no data GET.
	before := a.gets()
	got, err := a.getAll(ctx, query, partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, got, want)
	mem := a.metric("durashuffle_served_bytes_total", "source=memory")
	if mem == 0 || a.metric("durashuffle_served_bytes_total", "source=s3") != 0 {
		t.Fatalf("a served %v bytes from memory and %v from s3; want all from memory", mem, a.metric("durashuffle_served_bytes_total", "source=s3"))
	}
	// The stage manifest and its index: at most 2 GETs, none for data.
	if n := a.gets() - before; n > 2 {
		t.Fatalf("a made %v GETs reading from memory, want at most the 2 metadata GETs", n)
	}

	// B reads A's workers from A, over Flight.
	before = b.gets()
	got, err = b.getAll(ctx, query, partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, got, want)
	peerBytes := b.metric("durashuffle_served_bytes_total", "source=peer")
	if peerBytes != mem || b.metric("durashuffle_served_bytes_total", "source=s3") != 0 {
		t.Fatalf("b: %v bytes from peers (a served %v from memory), %v from s3", peerBytes, mem, b.metric("durashuffle_served_bytes_total", "source=s3"))
	}
	if n := b.gets() - before; n > 2 {
		t.Fatalf("b made %v GETs reading from its peer, want at most the 2 metadata GETs", n)
	}
	if sent := a.metric("durashuffle_peer_sent_bytes_total"); sent != peerBytes {
		t.Fatalf("a sent %v bytes to peers, b received %v", sent, peerBytes)
	}
	if f := b.metric("durashuffle_fallbacks_total"); f != 0 {
		t.Fatalf("b fell back %v times with a healthy peer", f)
	}

	// release drops the stage from A: reads go on, from S3.
	rel, err := a.fc.Release(ctx, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Workers != 2 || rel.BytesReleased == 0 || a.metric("durashuffle_memstore_released_bytes_total") != float64(rel.BytesReleased) {
		t.Fatalf("release: %+v, released metric %v", rel, a.metric("durashuffle_memstore_released_bytes_total"))
	}
	if a.metric("durashuffle_memstore_bytes") != 0 {
		t.Fatalf("memstore holds %v bytes after release", a.metric("durashuffle_memstore_bytes"))
	}
	got, err = b.getAll(ctx, query, partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, got, want)
	if b.metric("durashuffle_fallbacks_total", "reason=miss") == 0 || b.metric("durashuffle_served_bytes_total", "source=s3") == 0 {
		t.Fatalf("after release: %v misses, %v bytes from s3", b.metric("durashuffle_fallbacks_total", "reason=miss"), b.metric("durashuffle_served_bytes_total", "source=s3"))
	}
}

func TestFastPathPeerKilledMidDoGet(t *testing.T) {
	tg := newTarget(t, backends[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startFast(t, tg, "256MiB", "", "")
	b := startFast(t, tg, "0", "", "")
	const query, partitions = "fast-kill", 16
	want := writeStage(t, ctx, a, query, partitions, 150_000)
	got, err := b.getAll(ctx, query, partitions, func() {
		// B has at most its window and the stream's flow-control window
		// fetched: most of the stage is still to come from A.
		if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		a.cmd.Wait()
	})
	if err != nil {
		t.Fatalf("DoGet with the peer killed: %v\n%s", err, b.stderr.String())
	}
	sameRows(t, got, want)
	peer, s3 := b.metric("durashuffle_served_bytes_total", "source=peer"), b.metric("durashuffle_served_bytes_total", "source=s3")
	unavailable := b.metric("durashuffle_fallbacks_total", "reason=unavailable")
	t.Logf("from the peer %v bytes, from s3 %v bytes, %v unavailable fallbacks", peer, s3, unavailable)
	if peer == 0 || s3 == 0 || unavailable == 0 {
		t.Fatalf("want bytes from the peer before the kill, then fallbacks (unavailable) to s3: peer %v, s3 %v, unavailable %v", peer, s3, unavailable)
	}
}

func TestFastPathPeerFlipsAByte(t *testing.T) {
	tg := newTarget(t, backends[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	px := newH2Proxy(t, h2Flip)
	a := startFast(t, tg, "256MiB", px.addr, "")
	px.target = a.flight
	b := startFast(t, tg, "0", "", "")
	const query, partitions = "fast-flip", 8
	want := writeStage(t, ctx, a, query, partitions, 40_000)
	got, err := b.getAll(ctx, query, partitions, nil)
	if err != nil {
		t.Fatalf("DoGet through a corrupting peer: %v", err)
	}
	sameRows(t, got, want)
	flipped := px.flipped.Load()
	checksum := b.metric("durashuffle_fallbacks_total", "reason=checksum")
	t.Logf("bytes flipped %d, fallbacks %s, from s3 %v, from peer %v", flipped, b.fallbacks(),
		b.metric("durashuffle_served_bytes_total", "source=s3"), b.metric("durashuffle_served_bytes_total", "source=peer"))
	if flipped == 0 {
		t.Fatal("the proxy flipped no byte: the test did not run its fault")
	}
	if checksum == 0 || checksum > float64(flipped) || b.metric("durashuffle_served_bytes_total", "source=s3") == 0 ||
		b.metric("durashuffle_served_bytes_total", "source=peer") == 0 {
		t.Fatalf("%d bytes flipped, %v frames caught by CRC32C and read from s3", flipped, checksum)
	}
}

func TestFastPathPeerStalls(t *testing.T) {
	tg := newTarget(t, backends[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	px := newH2Proxy(t, h2Stall)
	a := startFast(t, tg, "256MiB", px.addr, "")
	px.target = a.flight
	b := startFast(t, tg, "0", "", "")
	const query, partitions = "fast-stall", 4
	want := writeStage(t, ctx, a, query, partitions, 20_000)
	got, err := b.getAll(ctx, query, partitions, nil)
	if err != nil {
		t.Fatalf("DoGet with a stalled peer: %v", err)
	}
	sameRows(t, got, want)
	timeout := b.metric("durashuffle_fallbacks_total", "reason=timeout")
	s3 := b.metric("durashuffle_served_bytes_total", "source=s3")
	t.Logf("stalled after %d bytes; fallbacks %s; %v hedged to s3, %v bytes from s3, %v from the peer", px.passed.Load(), b.fallbacks(), timeout, s3,
		b.metric("durashuffle_served_bytes_total", "source=peer"))
	if !px.stalled.Load() || timeout == 0 || s3 == 0 {
		t.Fatalf("stalled %v, timeouts %v, s3 bytes %v: want the stalled ranges hedged to s3", px.stalled.Load(), timeout, s3)
	}
}

func TestFastPathPeerWrongToken(t *testing.T) {
	tg := newTarget(t, backends[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startFast(t, tg, "256MiB", "", "token-of-a-0123456789")
	b := startFast(t, tg, "0", "", "token-of-b-9876543210")
	const query, partitions = "fast-token", 8
	want := writeStage(t, ctx, a, query, partitions, 40_000)
	got, err := b.getAll(ctx, query, partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, got, want)
	refused := b.metric("durashuffle_fallbacks_total", "reason=refused")
	if refused == 0 || b.metric("durashuffle_served_bytes_total", "source=peer") != 0 {
		t.Fatalf("refused %v, peer bytes %v: want every peer call refused", refused, b.metric("durashuffle_served_bytes_total", "source=peer"))
	}
	if n := a.metric("durashuffle_sidecar_calls_total", "method=DoAction", "code=Unauthenticated"); n != refused {
		t.Fatalf("a refused %v calls, b counted %v refusals", n, refused)
	}
	if strings.Contains(a.stderr.String(), "token-of-b") || strings.Contains(b.stderr.String(), "token-of-") {
		t.Fatal("a token was logged")
	}
}

func TestFastPathMemoryStoreFull(t *testing.T) {
	tg := newTarget(t, backends[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startFast(t, tg, "1MiB", "", "") // less than one chunk buffer
	const query, partitions = "fast-full", 8
	want := writeStage(t, ctx, a, query, partitions, 40_000)
	if held := a.heldWorkers(ctx, query); len(held) != 0 {
		t.Fatalf("a 1 MiB store holds %v", held)
	}
	if a.metric("durashuffle_memstore_declined_bytes_total") == 0 || a.metric("durashuffle_memstore_admitted_bytes_total") != 0 {
		t.Fatalf("declined %v, admitted %v", a.metric("durashuffle_memstore_declined_bytes_total"), a.metric("durashuffle_memstore_admitted_bytes_total"))
	}
	got, err := a.getAll(ctx, query, partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, got, want)
	// Not advertised: no peer or memory attempt, so no fallback either.
	if a.metric("durashuffle_served_bytes_total", "source=memory") != 0 || a.metric("durashuffle_served_bytes_total", "source=s3") == 0 ||
		a.metric("durashuffle_fallbacks_total") != 0 {
		t.Fatalf("memory %v, s3 %v, fallbacks %v", a.metric("durashuffle_served_bytes_total", "source=memory"),
			a.metric("durashuffle_served_bytes_total", "source=s3"), a.metric("durashuffle_fallbacks_total"))
	}
	if a.metric("durashuffle_sidecar_commits_total") != 2 {
		t.Fatalf("commits %v, want 2", a.metric("durashuffle_sidecar_commits_total"))
	}
}

func TestFastPathStageDeletedWhileHeld(t *testing.T) {
	tg := newTarget(t, backends[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startFast(t, tg, "256MiB", "", "")
	b := startFast(t, tg, "0", "", "")
	const query, partitions = "fast-deleted", 8
	want := writeStage(t, ctx, a, query, partitions, 20_000)
	// B opens (and caches) the sealed stage first.
	got, err := b.getAll(ctx, query, partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, got, want)
	held := a.metric("durashuffle_memstore_bytes")
	if held == 0 {
		t.Fatal("a holds nothing before the delete")
	}
	if _, err := a.fc.DeleteQuery(ctx, query); err != nil {
		t.Fatal(err)
	}
	if a.metric("durashuffle_memstore_bytes") != 0 || a.metric("durashuffle_memstore_released_bytes_total") != held {
		t.Fatalf("after delete-query: %v bytes held, %v released, %v held before",
			a.metric("durashuffle_memstore_bytes"), a.metric("durashuffle_memstore_released_bytes_total"), held)
	}
	for name, s := range map[string]*fastSidecar{"a": a, "b": b} {
		_, err := s.getAll(ctx, query, partitions, nil)
		if status.Code(err) != codes.NotFound {
			t.Fatalf("%s: DoGet of the deleted stage: %v, want NotFound", name, err)
		}
	}
}

// h2Proxy forwards TCP to target and interferes with the server's
// HTTP/2 DATA frames (the answers' bytes): it parses the frames, so the
// framing stays intact and only payload is touched.
type h2Proxy struct {
	t       *testing.T
	addr    string
	target  string
	mode    int
	flipped atomic.Int64
	stalled atomic.Bool
	passed  atomic.Int64 // DATA payload bytes passed
	done    chan struct{}
	mu      sync.Mutex
	conns   []net.Conn
}

const (
	h2Flip  = iota // flip one byte in the middle of every 32nd large DATA frame
	h2Stall        // pass 64 KiB of DATA payload, then nothing more
)

func newH2Proxy(t *testing.T, mode int) *h2Proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &h2Proxy{t: t, addr: ln.Addr().String(), mode: mode, done: make(chan struct{})}
	t.Cleanup(func() {
		close(p.done)
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *h2Proxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }()
	defer c.Close()
	var hdr [9]byte
	var large int
	for {
		if _, err := io.ReadFull(up, hdr[:]); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(up, payload); err != nil {
			return
		}
		if hdr[3] == 0 && n > 0 { // DATA
			switch p.mode {
			case h2Flip:
				if n >= 4096 && hdr[4]&0x8 == 0 { // not padded
					if large++; large%32 == 1 {
						payload[n/2] ^= 0x5a
						p.flipped.Add(1)
					}
				}
			case h2Stall:
				if p.passed.Load() >= 64<<10 {
					p.stalled.Store(true)
					<-p.done // hold the connection, send nothing more
					return
				}
			}
			p.passed.Add(int64(n))
		}
		if _, err := c.Write(append(hdr[:], payload...)); err != nil {
			return
		}
	}
}
