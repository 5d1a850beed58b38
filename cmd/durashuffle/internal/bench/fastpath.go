package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

// ScenarioFastpath: sidecars serving fresh stage output from memory and
// from each other (bench fastpath).
const ScenarioFastpath = "fastpath"

// The peer link of bench fastpath: a data-centre network between the
// sidecars. toxiproxy's latency is in whole milliseconds per direction,
// so 1 ms each way (2 ms round trip) is the smallest it can add.
const (
	fastSidecars      = 4
	peerLatency       = 2 * time.Millisecond
	peerConnBandwidth = 100 << 20
)

// Memory store modes of bench fastpath.
const (
	FastOff  = "memory store off"
	FastAll  = "on, all held"
	FastHalf = "on, half held"
	// FastFloor is the timeline's floor: memory store off and the
	// sidecars on the endpoint without the S3 link's shaping, so the read
	// costs only decoding, checking and sending the rows on this machine.
	FastFloor = "off, S3 unshaped (floor)"
)

// FastpathRow is one mode of bench fastpath: four sidecars each wrote one
// worker, then four readers (one per sidecar) read a quarter of the
// partitions each, at once. The counts are the sidecars' own metrics
// over the read, summed.
type FastpathRow struct {
	Mode        string           `json:"mode"`
	WorkersHeld int              `json:"workers_held"`
	ReadSeconds float64          `json:"read_seconds"`
	Rounds      []float64        `json:"rounds"`
	Rows        int64            `json:"rows"`
	StoredBytes int64            `json:"stored_bytes"`
	Gets        int64            `json:"gets"`       // GetObject requests, metadata included
	BytesBy     map[string]int64 `json:"bytes_by"`   // served bytes by source
	Fallbacks   map[string]int64 `json:"fallbacks"`  // by reason
	Errors      int              `json:"errors"`     // failed DoGets
	MetaGets    int64            `json:"meta_gets"`  // GETs of the stage manifest and index
	PeerBytes   int64            `json:"peer_bytes"` // bytes the sidecars served to peers
}

// fastSidecar is one `durashuffle serve` child.
type fastSidecar struct {
	cmd     *exec.Cmd
	flight  string
	metrics string
	peer    *Link
	fc      *flightclient.Client
	stderr  *strings.Builder
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startFastSidecars starts the sidecars on the shaped S3 link, each with
// the memory store budget of mem[i] and a peer link of its own.
func (e *Env) startFastSidecars(ctx context.Context, mem []durashuffle.Size, unshaped bool) ([]*fastSidecar, error) {
	cfg := e.o.Config
	endpoint := e.Endpoint
	if e.Link.Addr != "" && !unshaped {
		// The link moves TCP bytes: over it the endpoint speaks what it
		// speaks (HTTPS with the default --tls, its CA in ca_file).
		scheme, _, _ := strings.Cut(e.Endpoint, "://")
		endpoint = scheme + "://" + e.Link.Addr
	}
	var out []*fastSidecar
	stop := func() { e.stopFastSidecars(out) }
	for i := range fastSidecars {
		s := &fastSidecar{stderr: &strings.Builder{}}
		out = append(out, s)
		var err error
		if s.flight, err = freeAddr(); err != nil {
			stop()
			return nil, err
		}
		if s.metrics, err = freeAddr(); err != nil {
			stop()
			return nil, err
		}
		if s.peer, err = StartLink("http://"+s.flight, peerLatency, peerConnBandwidth); err != nil {
			stop()
			return nil, err
		}
		args := []string{"serve", "--listen", s.flight, "--metrics-listen", s.metrics, "--advertise-addr", s.peer.Addr,
			"--memory-store-bytes", strconv.FormatInt(int64(mem[i]), 10),
			"--endpoint", endpoint, "--bucket", e.Bucket, "--prefix", cfg.Store.Prefix,
			"--chunk-size", cfg.Write.ChunkSize.String(), "--upload-concurrency", strconv.Itoa(cfg.Write.UploadConcurrency),
			"--read-range-bytes", cfg.Read.RangeBytes.String(), "--read-ahead", strconv.Itoa(cfg.Read.Ahead),
			"--compression", cfg.Write.Compression, "--log-level", "warn"}
		if cfg.Store.PathStyle || e.Embedded {
			args = append(args, "--path-style")
		}
		if cfg.Store.Region != "" {
			args = append(args, "--region", cfg.Store.Region)
		}
		if cfg.Store.CAFile != "" {
			args = append(args, "--ca-file", cfg.Store.CAFile)
		}
		s.cmd = exec.CommandContext(ctx, e.o.Runner.Command[0], args...)
		s.cmd.Env = os.Environ()
		if e.Embedded {
			s.cmd.Env = append(s.cmd.Env, "AWS_ACCESS_KEY_ID=durashuffle", "AWS_SECRET_ACCESS_KEY=durashuffle", "AWS_REGION=us-east-1")
		}
		s.cmd.Stderr = s.stderr
		if err := s.cmd.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("start sidecar %d: %w", i, err)
		}
	}
	for i, s := range out {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get("http://" + s.metrics + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				stop()
				return nil, fmt.Errorf("sidecar %d not ready after 30 s: %v\n%s", i, err, s.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		fc, err := flightclient.Dial(s.flight, flightclient.Options{DialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(int(cfg.Sidecar.MaxMessageBytes)))}})
		if err != nil {
			stop()
			return nil, err
		}
		s.fc = fc
	}
	return out, nil
}

func (e *Env) stopFastSidecars(ss []*fastSidecar) {
	for _, s := range ss {
		if s.fc != nil {
			s.fc.Close()
		}
		if s.cmd != nil && s.cmd.Process != nil {
			s.cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { s.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				s.cmd.Process.Kill()
				<-done
			}
		}
		if s.peer != nil {
			s.peer.Close()
		}
	}
}

// fastMetrics is what the bench reads of a sidecar's /metrics.
type fastMetrics struct {
	gets      int64
	bytesBy   map[string]int64
	fallbacks map[string]int64
	peerSent  int64
}

func (s *fastSidecar) scrape() (fastMetrics, error) {
	m := fastMetrics{bytesBy: map[string]int64{}, fallbacks: map[string]int64{}}
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		label := func(k string) string {
			_, rest, ok := strings.Cut(series, k+`="`)
			if !ok {
				return ""
			}
			v, _, _ := strings.Cut(rest, `"`)
			return v
		}
		switch {
		case strings.HasPrefix(series, "durashuffle_requests_total{") && label("op") == "GetObject":
			m.gets += int64(f)
		case strings.HasPrefix(series, "durashuffle_served_bytes_total{"):
			m.bytesBy[label("source")] += int64(f)
		case strings.HasPrefix(series, "durashuffle_fallbacks_total{"):
			m.fallbacks[label("reason")] += int64(f)
		case series == "durashuffle_peer_sent_bytes_total":
			m.peerSent += int64(f)
		}
	}
	return m, sc.Err()
}

func scrapeAll(ss []*fastSidecar) (fastMetrics, error) {
	sum := fastMetrics{bytesBy: map[string]int64{}, fallbacks: map[string]int64{}}
	for _, s := range ss {
		m, err := s.scrape()
		if err != nil {
			return sum, err
		}
		sum.gets += m.gets
		sum.peerSent += m.peerSent
		for k, v := range m.bytesBy {
			sum.bytesBy[k] += v
		}
		for k, v := range m.fallbacks {
			sum.fallbacks[k] += v
		}
	}
	return sum, nil
}

func (a fastMetrics) minus(b fastMetrics) fastMetrics {
	d := fastMetrics{gets: a.gets - b.gets, peerSent: a.peerSent - b.peerSent, bytesBy: map[string]int64{}, fallbacks: map[string]int64{}}
	for k, v := range a.bytesBy {
		d.bytesBy[k] = v - b.bytesBy[k]
	}
	for k, v := range a.fallbacks {
		d.fallbacks[k] = v - b.fallbacks[k]
	}
	return d
}

// putFastWorker DoPuts rows [lo, hi) of the demo data as worker w.
func putFastWorker(ctx context.Context, fc *flightclient.Client, query string, w, partitions int, lo, hi int64, seed uint64) (int64, error) {
	b, err := demo.NewBatcher(demo.Generator{Seed: seed}, partitions, nil)
	if err != nil {
		return 0, err
	}
	defer b.Release()
	pw, err := fc.Put(ctx, flightclient.PutCommand{Query: query, Stage: 0, Worker: flightclient.WorkerID(strconv.Itoa(w)), Attempt: "a", Partitions: partitions}, demo.Schema())
	if err != nil {
		return 0, err
	}
	defer pw.Abort()
	for _, r := range demo.Chunks(demo.Range{Lo: lo, Hi: hi}, 8192) {
		for _, p := range b.Batch(r, nil) {
			if err == nil {
				err = pw.Write(p.Partition, p.Record)
			}
			p.Record.Release()
		}
		if err != nil {
			return 0, err
		}
	}
	res, err := pw.Commit()
	if err != nil {
		return 0, err
	}
	if !res.Committed {
		return 0, fmt.Errorf("worker %d not committed: %+v", w, res)
	}
	return res.BytesStored, nil
}

// getFastRange DoGets partitions [lo, hi) and returns the rows.
func getFastRange(ctx context.Context, fc *flightclient.Client, query string, lo, hi int) (int64, error) {
	ps := make([]int, 0, hi-lo)
	for p := lo; p < hi; p++ {
		ps = append(ps, p)
	}
	rdr, err := fc.Get(ctx, flightclient.Ticket{Query: query, Stage: 0, Partitions: ps})
	if err != nil {
		return 0, err
	}
	defer rdr.Release()
	var rows int64
	for rdr.Next() {
		rows += rdr.RecordBatch().NumRows()
	}
	return rows, rdr.Err()
}

// fastRound writes a stage through fresh sidecars with the given memory
// budgets and reads it back; it returns the row of one round.
func (e *Env) fastRound(ctx context.Context, mode string, mem []durashuffle.Size, round int, rowsPerWorker int64) (FastpathRow, error) {
	row := FastpathRow{Mode: mode}
	ss, err := e.startFastSidecars(ctx, mem, mode == FastFloor)
	if err != nil {
		return row, err
	}
	defer e.stopFastSidecars(ss)
	partitions := max(fastSidecars, e.o.Data.Partitions)
	q := e.query("fastpath", strings.NewReplacer(" ", "", ",", "-", "(", "", ")", "").Replace(mode), strconv.Itoa(round))
	defer e.cleanup(ctx, q)
	g, gctx := errgroup.WithContext(ctx)
	stored := make([]int64, fastSidecars)
	for i, s := range ss {
		g.Go(func() (err error) {
			stored[i], err = putFastWorker(gctx, s.fc, q, i, partitions, int64(i)*rowsPerWorker, int64(i+1)*rowsPerWorker, e.o.Data.Seed)
			if err != nil {
				return fmt.Errorf("sidecar %d DoPut: %w\n%s", i, err, s.stderr.String())
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return row, err
	}
	for _, n := range stored {
		row.StoredBytes += n
	}
	if _, err := ss[0].fc.Seal(ctx, q, 0, fastSidecars); err != nil {
		return row, fmt.Errorf("seal: %w", err)
	}
	for _, s := range ss {
		h, err := s.fc.Held(ctx, q, 0)
		if err != nil {
			return row, fmt.Errorf("held: %w", err)
		}
		row.WorkersHeld += len(h.Workers)
	}
	before, err := scrapeAll(ss)
	if err != nil {
		return row, err
	}
	start := time.Now()
	rows := make([]int64, fastSidecars)
	errs := make([]error, fastSidecars)
	g = &errgroup.Group{}
	per := partitions / fastSidecars
	for j, s := range ss {
		g.Go(func() error {
			hi := (j + 1) * per
			if j == fastSidecars-1 {
				hi = partitions
			}
			rows[j], errs[j] = getFastRange(ctx, s.fc, q, j*per, hi)
			return nil
		})
	}
	g.Wait()
	row.ReadSeconds = time.Since(start).Seconds()
	after, err := scrapeAll(ss)
	if err != nil {
		return row, err
	}
	for j, err := range errs {
		if err != nil {
			row.Errors++
			e.logf("fastpath %s: reader %d: %v", mode, j, err)
		}
		row.Rows += rows[j]
	}
	d := after.minus(before)
	row.Gets, row.BytesBy, row.Fallbacks, row.PeerBytes = d.gets, d.bytesBy, d.fallbacks, d.peerSent
	row.MetaGets = 2 * fastSidecars // each reader: the stage manifest and one ranged GET of the index
	row.Rounds = []float64{row.ReadSeconds}
	return row, nil
}

// runFastpath: memory store off, on with everything held, on with half
// the workers held (sidecars 2 and 3 without a memory store); the same
// stage each time, written by four sidecar processes, read by four
// readers at once.
func (e *Env) runFastpath(ctx context.Context) (*Report, error) {
	cfg := e.o.Config
	spl, err := e.storedPerLogical()
	if err != nil {
		return nil, err
	}
	perWorker := e.rowsFor(e.o.Stored/fastSidecars, spl)
	d := e.data(e.o.Stored, spl)
	rep := &Report{Scenario: ScenarioFastpath, Link: e.Link.Info(cfg.Read.Ahead * fastSidecars), Setup: e.setup(d, cfg, e.storeName(), spl)}
	rep.Setup.Rows, rep.Setup.Workers, rep.Setup.Readers = perWorker*fastSidecars, fastSidecars, fastSidecars
	rep.Setup.Partitions = max(fastSidecars, e.o.Data.Partitions)
	all := durashuffle.Size(1 << 30)
	modes := []struct {
		name string
		mem  []durashuffle.Size
	}{
		{FastOff, []durashuffle.Size{0, 0, 0, 0}},
		{FastAll, []durashuffle.Size{all, all, all, all}},
		{FastHalf, []durashuffle.Size{all, all, 0, 0}},
		{FastFloor, []durashuffle.Size{0, 0, 0, 0}},
	}
	e.logf("fastpath: %d sidecars x %d rows (~%s stored each), %d partitions; peers on %s round trips, %s/s per connection",
		fastSidecars, perWorker, sizeString(e.o.Stored/fastSidecars), rep.Setup.Partitions, peerLatency, sizeString(peerConnBandwidth))
	rounds := max(1, e.o.Rounds)
	rows := make([]FastpathRow, len(modes))
	errors := make([]int, len(modes))
	for round := range rounds {
		for k := range modes {
			i := (k + round) % len(modes)
			m := modes[i]
			r, err := e.fastRound(ctx, m.name, m.mem, round, perWorker)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, m.name, err)
			}
			e.logf("fastpath round %d %s: read %.2f s, %d GETs, bytes %v, fallbacks %v, %d workers held",
				round+1, m.name, r.ReadSeconds, r.Gets, r.BytesBy, r.Fallbacks, r.WorkersHeld)
			errors[i] += r.Errors
			if round == 0 {
				rows[i] = r
				continue
			}
			rounds := append(rows[i].Rounds, r.ReadSeconds)
			// Counts from the round with the median time are reported.
			if med := medianSeconds(rounds); r.ReadSeconds == med || rows[i].ReadSeconds != med {
				rows[i] = r
			}
			rows[i].Rounds, rows[i].ReadSeconds = rounds, medianSeconds(rounds)
		}
	}
	for i := range rows {
		rows[i].Errors = errors[i]
	}
	rep.Fastpath = rows
	off, on, half, floor := rows[0].ReadSeconds, rows[1].ReadSeconds, rows[2].ReadSeconds, rows[3].ReadSeconds
	rep.Targets = append(rep.Targets,
		atMost("all held: read time / memory store off", on/off, 0.3),
		atMost("all held: data bytes from S3", float64(rows[1].BytesBy["s3"]), 0),
		atMost("all held: GETs beyond the readers' metadata GETs", float64(rows[1].Gets-rows[1].MetaGets), 0),
		atMost("half held: read time / memory store off", half/off, 1),
		atLeast("half held: read time / all held", half/on, 1),
		atMost("failed DoGets, all modes", float64(rows[0].Errors+rows[1].Errors+rows[2].Errors+rows[3].Errors), 0),
	)
	e.logf("fastpath: floor (no S3 shaping, no memory store) %.3f s = %.2f of off; all held %.3f s = floor + %.3f s",
		floor, ratio(floor, off), on, on-floor)
	return rep, nil
}

func medianSeconds(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// fastpathTable renders the rows as Markdown (text: the same table).
func fastpathTable(rep *Report) string {
	var b strings.Builder
	off := 0.0
	for _, r := range rep.Fastpath {
		if r.Mode == FastOff {
			off = r.ReadSeconds
		}
	}
	b.WriteString("| memory store | workers held | read s (rounds) | vs off | rows | S3 GETs (metadata) | from memory MiB | from peers MiB | from S3 MiB | fallbacks | failed DoGets |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, r := range rep.Fastpath {
		fmt.Fprintf(&b, "| %s | %d of %d | %.3f (%s) | %.2f | %d | %d (%d) | %.1f | %.1f | %.1f | %s | %d |\n",
			r.Mode, r.WorkersHeld, fastSidecars, r.ReadSeconds, joinFloats(r.Rounds), ratio(r.ReadSeconds, off), r.Rows,
			r.Gets, r.MetaGets, mib(r.BytesBy["memory"]), mib(r.BytesBy["peer"]), mib(r.BytesBy["s3"]), fallbackString(r.Fallbacks), r.Errors)
	}
	return b.String()
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func fallbackString(m map[string]int64) string {
	var parts []string
	for _, k := range []string{"miss", "checksum", "timeout", "refused", "unavailable", "error"} {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func fastpathSetup(rep *Report) string {
	s := rep.Setup
	return fmt.Sprintf("%d sidecar processes each DoPut one worker (%d rows in all, %d partitions, %s chunks, %s; %s stored in all), sealed; then %d readers at once, one per sidecar, each DoGets a quarter of the partitions. "+
		"S3 link: %.0f ms round trip, %s/s per connection. Peers: each sidecar's Flight port behind a link of its own, %s round trip, %s/s per connection. "+
		"Half held: sidecars 0 and 1 with a 1 GiB memory store, 2 and 3 without. Floor: memory store off and the sidecars on the endpoint directly, without the S3 link: what decoding, checking and sending the rows costs on this machine. %d CPUs; store: %s; %d rounds, medians.\n",
		fastSidecars, s.Rows, s.Partitions, sizeString(s.ChunkSize), s.Compression, sizeString(fastStored(rep)), fastSidecars,
		rep.Link.LatencyMS, sizeString(rep.Link.ConnBandwidthBytes), peerLatency, sizeString(peerConnBandwidth), s.CPUs, s.Store, s.Rounds)
}

func fastStored(rep *Report) int64 {
	if len(rep.Fastpath) == 0 {
		return 0
	}
	return rep.Fastpath[0].StoredBytes
}
