package clustertest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/clustertest"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// The demo-sized write of these tests: 400,000 lineitem rows from 2
// workers into 16 partitions, about 34 MiB stored in 5 MiB parts (4 per
// worker), 2 parts in flight so the upload lasts long enough to lose a
// node in the middle of it.
var demoArgs = []string{"--rows", "400000", "--workers", "2", "--partitions", "16",
	"--chunk-size", "5MiB", "--upload-concurrency", "2"}

const demoRows = 400_000

var shared struct {
	once    sync.Once
	err     error
	cluster *clustertest.Cluster
	cli     string // the durashuffle binary
	dir     string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cluster != nil {
		shared.cluster.Stop()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// cluster returns the package's four-node MinIO, every node up and the
// cluster writable, starting it (and building the CLI) on first use.
// It fails the test, never skips it, when that cannot be done.
func cluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "durashuffle-cluster-")
		if shared.err != nil {
			return
		}
		var bin, root string
		if bin, shared.err = testenv.MinIOBinary(); shared.err != nil {
			return
		}
		if root, shared.err = testenv.RepoRoot(); shared.err != nil {
			return
		}
		shared.cli = filepath.Join(shared.dir, "durashuffle")
		build := exec.Command("go", "build", "-o", shared.cli, "./cmd/durashuffle")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			shared.err = fmt.Errorf("go build ./cmd/durashuffle: %w\n%s", err, out)
			return
		}
		user, password := testenv.Credentials()
		if shared.err = testenv.UseTestCredentials(); shared.err != nil {
			return
		}
		shared.cluster, shared.err = clustertest.Start(bin, shared.dir, 4, user, password)
	})
	if shared.err != nil {
		t.Fatalf("four-node MinIO cluster: %v", shared.err)
	}
	c := shared.cluster
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.WaitAllUp(ctx); err != nil {
		t.Fatalf("bring every node of the cluster up: %v", err)
	}
	// Whatever the test does to the nodes, the next one gets them all.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if err := c.WaitAllUp(ctx); err != nil {
			t.Errorf("bring the nodes back after the test: %v", err)
		}
	})
	return c
}

// bucket makes a fresh bucket through node 0 and returns its name and a
// store on it (no retries: what the tests check must be what is there).
func bucket(t *testing.T, c *clustertest.Cluster) (string, store.Store) {
	t.Helper()
	name := "ds-" + strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	name = strings.Trim(name[:min(len(name), 50)], "-")
	user, password := testenv.Credentials()
	s, err := s3store.New(context.Background(), s3store.Options{Bucket: name, Endpoint: c.URL(0), Region: "us-east-1",
		PathStyle: true, AccessKeyID: user, SecretAccessKey: password})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.EnsureBucket(ctx); err != nil {
		t.Fatalf("bucket %s: %v", name, err)
	}
	return name, s
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// command is the CLI, pointed at node 0 and bucket, not yet started.
func command(ctx context.Context, c *clustertest.Cluster, bucket string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	args = append(args, "--endpoint", c.URL(0), "--path-style", "--region", "us-east-1", "--bucket", bucket)
	cmd := exec.CommandContext(ctx, shared.cli, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = os.Environ() // the test credentials are in it (UseTestCredentials)
	return cmd, &stdout, &stderr
}

func wait(cmd *exec.Cmd, start time.Time, stdout, stderr *bytes.Buffer) result {
	err := cmd.Wait()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		r.code = -1
		r.stderr += "\n" + err.Error()
	}
	return r
}

// run runs the CLI to its end (at most limit).
func run(t *testing.T, c *clustertest.Cluster, bucket string, limit time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd, stdout, stderr := command(ctx, c, bucket, args...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return wait(cmd, start, stdout, stderr)
}

// demoSummary is the part of `demo --json` the tests check.
type demoSummary struct {
	Committed          bool             `json:"committed"`
	Verified           bool             `json:"verified"`
	RowsWritten        int64            `json:"rows_written"`
	RowsRead           int64            `json:"rows_read"`
	PartitionsVerified int              `json:"partitions_verified"`
	Parts              int              `json:"parts"`
	BytesStored        int64            `json:"bytes_stored"`
	WriteSeconds       float64          `json:"write_seconds"`
	Requests           map[string]int64 `json:"requests"`
	Retries            map[string]int64 `json:"retries"`
	OpenUploads        int              `json:"open_uploads"`
}

func (r result) demo(t *testing.T) demoSummary {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("demo exited %d after %v\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stderr)
	}
	var s demoSummary
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("demo --json printed no summary: %v\n%s", err, r.stdout)
	}
	if !s.Committed || !s.Verified || s.RowsWritten != demoRows || s.RowsRead != demoRows || s.PartitionsVerified != 16 || s.OpenUploads != 0 {
		t.Fatalf("demo summary: %+v, want %d rows committed, read back and verified in 16 partitions, no upload open", s, demoRows)
	}
	return s
}

// waitForUpload polls (through node 0) until a multipart upload is open
// under prefix, or the command exits.
func waitForUpload(t *testing.T, s store.Store, prefix string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ups, err := s.ListUploads(ctx, prefix)
		cancel()
		if err == nil && len(ups) > 0 {
			return
		}
		select {
		case <-exited:
			t.Fatal("the write ended before any multipart upload was open: nothing was killed mid-upload")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no multipart upload open under %s after 2 minutes (last error %v)", prefix, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leftovers counts, through node 0, the objects and open uploads under
// prefix.
func leftovers(t *testing.T, s store.Store, prefix string) (objects []store.ObjectInfo, uploads []store.UploadInfo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	objects, _, err := s.List(ctx, prefix, "")
	if err != nil {
		t.Fatalf("list %s: %v", prefix, err)
	}
	uploads, err = s.ListUploads(ctx, prefix)
	if err != nil {
		t.Fatalf("list uploads under %s: %v", prefix, err)
	}
	return objects, uploads
}

// TestClusterWriteSurvivesNodeKill: a node (not the one the client talks
// to) is SIGKILLed while the demo's multipart uploads are open. Three of
// four drives keep write quorum, so the write commits, reads back
// verified, and leaves no upload open; once the node is back, gc finds
// nothing to remove.
func TestClusterWriteSurvivesNodeKill(t *testing.T) {
	c := cluster(t)
	b, s := bucket(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, stdout, stderr := command(ctx, c, b, append([]string{"demo", "--json", "--query", "kill1"}, demoArgs...)...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var r result
	go func() { r = wait(cmd, start, stdout, stderr); close(exited) }()

	waitForUpload(t, s, "durashuffle/kill1/", exited)
	killedAt := time.Since(start)
	if err := c.Kill(3); err != nil {
		t.Fatal(err)
	}
	// Mid-upload means an upload was still open once the node was gone
	// (killedAt counts from the process's start, the write phase from
	// later, so the two durations do not compare).
	if _, ups := leftovers(t, s, "durashuffle/kill1/"); len(ups) == 0 {
		t.Fatalf("node killed %v after start, but no upload was open any more: not mid-upload", killedAt)
	}
	<-exited
	sum := r.demo(t)
	t.Logf("node 4 SIGKILLed %v into the write; the demo committed and verified %d rows (%d parts, %.1f MiB) in %v: write %.2fs, retries %v, requests %v",
		killedAt.Round(time.Millisecond), sum.RowsWritten, sum.Parts, float64(sum.BytesStored)/(1<<20), r.took.Round(time.Millisecond), sum.WriteSeconds, sum.Retries, sum.Requests)
	if _, ups := leftovers(t, s, ""); len(ups) != 0 {
		t.Fatalf("uploads open after the demo: %v", ups)
	}

	// The node comes back; gc has nothing to do: everything is committed.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel2()
	if err := c.WaitAllUp(ctx2); err != nil {
		t.Fatal(err)
	}
	bucketSettled(t, s)
	var rep gc.Report
	g := run(t, c, b, time.Minute, "gc", "--older-than", "0s", "--json")
	if g.code != 0 || json.Unmarshal([]byte(g.stdout), &rep) != nil {
		t.Fatalf("gc exited %d:\n%s%s", g.code, g.stdout, g.stderr)
	}
	if rep.Totals != (gc.Totals{}) {
		t.Fatalf("gc after a committed write removed %+v, want nothing", rep.Totals)
	}
}

// TestClusterReadWithNodeDown: a stage written with every node up reads
// back byte for byte the same with one node down (read quorum is 2).
func TestClusterReadWithNodeDown(t *testing.T) {
	c := cluster(t)
	b, _ := bucket(t, c)
	run(t, c, b, 3*time.Minute, append([]string{"demo", "--json", "--query", "read1"}, demoArgs...)...).demo(t)

	read := func(name string) (digest string, rows int64, took time.Duration) {
		out := filepath.Join(t.TempDir(), name+".arrow")
		r := run(t, c, b, 2*time.Minute, "read", "--query", "read1", "--stage", "0", "--format", "arrow", "-o", out)
		if r.code != 0 {
			t.Fatalf("read (%s) exited %d after %v:\n%s", name, r.code, r.took, r.stderr)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		h := sha256.New()
		rd, err := ipc.NewReader(teeReader{f, h})
		if err != nil {
			t.Fatalf("read (%s) output is not an Arrow stream: %v", name, err)
		}
		for rd.Next() {
			rows += rd.RecordBatch().NumRows()
		}
		if err := rd.Err(); err != nil {
			t.Fatalf("read (%s) output: %v", name, err)
		}
		rd.Release()
		return hex.EncodeToString(h.Sum(nil)), rows, r.took
	}
	want, wantRows, _ := read("all-up")
	if wantRows != demoRows {
		t.Fatalf("read with every node up: %d rows, want %d", wantRows, demoRows)
	}
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	got, rows, took := read("node-3-down")
	if got != want || rows != wantRows {
		t.Fatalf("read with node 3 down: %d rows, sha256 %s; with every node up %d rows, %s", rows, got, wantRows, want)
	}
	t.Logf("read of %d rows with node 3 of 4 down took %v, the same bytes as with all up (sha256 %s)", rows, took.Round(time.Millisecond), got[:16])
}

type teeReader struct {
	r interface{ Read([]byte) (int, error) }
	h interface{ Write([]byte) (int, error) }
}

func (t teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.h.Write(p[:n])
	return n, err
}

// TestClusterWriteWithoutQuorumFailsFast: with two of four nodes down
// MinIO has no write quorum and answers 503 SlowDownWrite, and hangs the
// abort and delete calls of the cleanup. With the default retry settings
// (8 attempts) and cleanup_timeout, the demo fails within about a minute,
// exits 1 naming the store's answer, says what cleanup it left to gc, and
// commits nothing. Once the nodes are back, gc leaves the bucket clean.
func TestClusterWriteWithoutQuorumFailsFast(t *testing.T) {
	c := cluster(t)
	b, s := bucket(t, c)
	for _, i := range []int{2, 3} {
		if err := c.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, c, b, 3*time.Minute, append([]string{"demo", "--json", "--query", "noquorum"}, demoArgs...)...)
	attempts := regexp.MustCompile(`gave up after (\d+) attempts`).FindStringSubmatch(r.stderr)
	t.Logf("demo with 2 of 4 nodes down: exit %d after %v; %v\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), attempts, r.stderr)
	if r.code != 1 {
		t.Fatalf("demo exited %d, want 1", r.code)
	}
	if !strings.Contains(r.stderr, "HTTP 503 SlowDownWrite") || attempts == nil || attempts[1] != "8" {
		t.Errorf("the error does not name the store's answer (HTTP 503 SlowDownWrite, gave up after 8 attempts)")
	}
	if r.took > 75*time.Second {
		t.Errorf("the failing write took %v, want about a minute at most", r.took)
	}
	cleanupLeft := strings.Contains(r.stderr, "left to gc")
	t.Logf("cleanup left to gc: %v", cleanupLeft)

	// Nothing is visible, even with the nodes still down.
	rd := run(t, c, b, time.Minute, "read", "--query", "noquorum", "--stage", "0", "--format", "jsonl")
	if rd.code != 1 || !strings.Contains(rd.stderr, "stage not found") {
		t.Fatalf("read of the failed stage: exit %d\n%s", rd.code, rd.stderr)
	}

	// The nodes come back; gc removes whatever the cleanup could not.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.WaitAllUp(ctx); err != nil {
		t.Fatal(err)
	}
	bucketSettled(t, s)
	objs, ups := leftovers(t, s, "durashuffle/")
	t.Logf("after the nodes returned: %d objects, %d uploads under the prefix", len(objs), len(ups))
	for _, o := range objs {
		if strings.HasSuffix(o.Key, "manifest.json") {
			t.Fatalf("the failed write left a manifest: %s", o.Key)
		}
	}
	g := run(t, c, b, time.Minute, "gc", "--older-than", "0s", "--json")
	var rep gc.Report
	if g.code != 0 || json.Unmarshal([]byte(g.stdout), &rep) != nil {
		t.Fatalf("gc exited %d:\n%s%s", g.code, g.stdout, g.stderr)
	}
	t.Logf("gc: %+v", rep.Totals)
	if rep.Totals.UploadsAborted != len(ups) {
		t.Errorf("gc aborted %d uploads, %d were open", rep.Totals.UploadsAborted, len(ups))
	}
	if objs, ups := leftovers(t, s, ""); len(objs) != 0 || len(ups) != 0 {
		t.Fatalf("bucket after gc: objects %v, uploads %v; want it empty", objs, ups)
	}
}

// TestClusterClientNodeRestarted: the node the client talks to is
// SIGKILLed mid-upload and started again at once. The writer's requests
// fail while it is down and are retried; when it is back, MinIO sometimes
// answers CompleteMultipartUpload with 400 InvalidPart (its quorum
// tie-break drops parts written while a node was marked offline). Either
// the write commits and reads back verified, or Commit fails with an error
// durashuffle.IsRetryable says a rerun may fix, nothing is committed, and
// no upload is left open; the rerun, as a new attempt, commits and
// verifies. It runs two rounds to meet both outcomes more often. A round
// can take about two minutes: MinIO may hold the Complete that long after
// the restart (measured: 7 attempts cut at request_timeout 15s, then
// success), which is slow but correct.
func TestClusterClientNodeRestarted(t *testing.T) {
	c := cluster(t)
	b, s := bucket(t, c)
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.Region, cfg.Store.PathStyle = b, c.URL(0), "us-east-1", true
	cfg.Write.ChunkSize, cfg.Write.UploadConcurrency = 5*durashuffle.MiB, 2
	// After such a restart MinIO can hold a request for about two
	// minutes; cut it and retry, as the retry layer does, rather than
	// wait on one attempt (the default request_timeout is 5m).
	cfg.Store.RequestTimeout = durashuffle.Duration(15 * time.Second)
	client, err := durashuffle.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	gen := demo.Generator{Seed: 7}
	const rows, partitions = 200_000, 16
	want := gen.Expected(rows, partitions)

	for round := 1; round <= 2; round++ {
		query := fmt.Sprintf("restart%d", round)
		allUp(t, c)
		before := client.Counter().Retries()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- writeStage(ctx, client, gen, query, "first", rows, partitions) }()
		waitForUpload(t, s, "durashuffle/"+query+"/", nil)
		if err := c.Kill(0); err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(0); err != nil {
			t.Fatal(err)
		}
		err := <-done
		took := time.Since(start)
		cancel()
		retries := diffRetries(client.Counter().Retries(), before)
		if err == nil {
			verify(t, client, query, partitions, want)
			t.Logf("round %d: node 1 (the client's) killed and restarted mid-upload: committed and verified in %v; retries %v", round, took.Round(time.Millisecond), retries)
			continue
		}
		t.Logf("round %d: node 1 (the client's) killed and restarted mid-upload: failed after %v: %v; retries %v", round, took.Round(time.Millisecond), err, retries)
		if !durashuffle.IsRetryable(err) {
			t.Fatalf("round %d: IsRetryable(%v) = false: the engine would not rerun the task", round, err)
		}
		if _, err := client.OpenStage(context.Background(), query, 0); !errors.Is(err, manifest.ErrStageNotFound) {
			t.Fatalf("round %d: the failed write is visible: %v", round, err)
		}
		if _, ups := leftovers(t, s, "durashuffle/"+query+"/"); len(ups) != 0 {
			var ce *durashuffle.CleanupError
			if !errors.As(err, &ce) {
				t.Fatalf("round %d: uploads left open %v, and the error does not say cleanup was left to gc", round, ups)
			}
		}
		// The engine reruns the task as a new attempt, once the cluster
		// takes writes again: a restarted node answers 503 SlowDownWrite
		// until it has rejoined.
		// An engine retries a task a few times (Spark: 4 attempts); the
		// node may still refuse writes for a while after it answers again.
		for attempt := 1; ; attempt++ {
			waited := time.Now()
			allUp(t, c)
			t.Logf("round %d: the cluster took writes again %v after the failure", round, time.Since(waited).Round(time.Millisecond))
			ctx, cancel = context.WithTimeout(context.Background(), 3*time.Minute)
			err = writeStage(ctx, client, gen, query, fmt.Sprintf("rerun%d", attempt), rows, partitions)
			cancel()
			if err == nil {
				break
			}
			if attempt == 3 || !durashuffle.IsRetryable(err) {
				t.Fatalf("round %d: rerun %d: %v", round, attempt, err)
			}
			t.Logf("round %d: rerun %d failed, retryably: %v", round, attempt, err)
			time.Sleep(2 * time.Second)
		}
		verify(t, client, query, partitions, want)
		t.Logf("round %d: the rerun committed and verified", round)
	}
}

// diffRetries is after - before, as "op/reason": n.
func diffRetries(after, before map[store.OpReason]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k.Op+"/"+k.Reason] = d
		}
	}
	return out
}

// allUp waits until every node is up and says the cluster takes writes.
func allUp(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.WaitAllUp(ctx); err != nil {
		t.Fatal(err)
	}
}

// bucketSettled waits until the bucket lists again after nodes
// rejoined. The health endpoint answers before a restarted node has
// loaded its bucket metadata, and for a moment after that a listing can
// answer 404 NoSuchBucket for a bucket that exists (seen in CI, seconds
// after WaitAllUp). What the tests then check must be the bucket's
// contents, not that moment.
func bucketSettled(t *testing.T, s store.Store) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		_, _, err := s.List(lctx, "", "")
		lcancel()
		if err == nil {
			if d := time.Since(start); d > time.Second {
				t.Logf("the bucket listed again %v after the nodes were up", d.Round(time.Millisecond))
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the bucket does not list %v after every node is up: %v", time.Since(start).Round(time.Second), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// writeStage writes rows [0, rows) of gen as worker 0 of query's stage 0
// (attempt), in 8192-row input batches, and commits; on a write failure
// it aborts.
func writeStage(ctx context.Context, c *durashuffle.Client, gen demo.Generator, query, attempt string, rows int64, partitions int) error {
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Attempt: attempt, Partitions: partitions, Schema: demo.Schema()})
	if err != nil {
		return err
	}
	bt, err := demo.NewBatcher(gen, partitions, nil)
	if err != nil {
		return err
	}
	defer bt.Release()
	for _, r := range demo.Chunks(demo.Range{Lo: 0, Hi: rows}, 8192) {
		parts := bt.Batch(r, nil)
		var werr error
		for _, p := range parts {
			if werr == nil {
				werr = w.Write(p.Partition, p.Record)
			}
			p.Record.Release()
		}
		if werr != nil {
			return errors.Join(werr, w.Abort())
		}
	}
	_, err = w.Commit(ctx)
	return err
}

// verify reads every partition of query's stage 0 and compares its rows
// and content hash with want.
func verify(t *testing.T, c *durashuffle.Client, query string, partitions int, want []demo.Digest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		t.Fatalf("open %s: %v", query, err)
	}
	for p := range partitions {
		rr, err := st.ReadPartitions(ctx, []int{p})
		if err != nil {
			t.Fatalf("read %s partition %d: %v", query, p, err)
		}
		var got demo.Digest
		for rr.Next() {
			if err := demo.Check(rr.RecordBatch(), p, partitions, &got); err != nil {
				t.Fatal(err)
			}
		}
		if err := rr.Err(); err != nil {
			t.Fatalf("read %s partition %d: %v", query, p, err)
		}
		rr.Close()
		if got != want[p] {
			t.Fatalf("%s partition %d: read %d rows with hash %016x, wrote %d rows with hash %016x", query, p, got.Rows, got.Sum, want[p].Rows, want[p].Sum)
		}
	}
}
