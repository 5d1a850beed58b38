package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

// TestServeWideStreamsWithinBound: a sidecar takes 8 DoPut streams at
// once, each of a worker's output into 4,096 partitions fed as a wide
// shuffle's map side feeds it (every 16,384-row input batch split across
// the partitions: 4 rows per FlightData), and its peak resident memory
// (VmHWM) stays at or below the memory bound it logs. Every stream
// commits every row.
func TestServeWideStreamsWithinBound(t *testing.T) {
	tg := newTarget(t, backends[1]) // MinIO
	const (
		streams    = 8
		partitions = 4096
		rows       = 150_000 // per stream: some 26 MiB of rows, 9,000 batches
	)
	flightAddr, metricsAddr := freePort(t), freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--log-format", "json", "--listen", flightAddr,
		"--metrics-listen", metricsAddr, "--max-streams", strconv.Itoa(streams)}, tg.flags...)...)
	cmd.Env = baseEnv(tg.env)
	var se syncBuffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 30 s: %v\n%s", err, se.String())
		}
	}
	var logged struct {
		Bound int64 `json:"bound"`
	}
	for _, line := range strings.Split(se.String(), "\n") {
		if strings.Contains(line, `"memory limit: `) {
			if err := json.Unmarshal([]byte(line), &logged); err != nil {
				t.Fatal(err)
			}
		}
	}
	if logged.Bound == 0 {
		t.Fatalf("serve logged no memory bound:\n%s", se.String())
	}

	fc, err := flightclient.Dial(flightAddr, flightclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	var wg sync.WaitGroup
	errs := make([]error, streams)
	for s := range streams {
		wg.Go(func() { errs[s] = putWide(ctx, fc, s, partitions, rows) })
	}
	wg.Wait()
	for s, err := range errs {
		if err != nil {
			t.Fatalf("stream %d: %v\n%s", s, err, se.String())
		}
	}
	hwm := vmHWM(t, cmd.Process.Pid)
	t.Logf("%d streams x %d partitions x %d rows: peak RSS %.1f MiB, bound %.1f MiB", streams, partitions, rows, float64(hwm)/(1<<20), float64(logged.Bound)/(1<<20))
	if hwm > logged.Bound {
		t.Fatalf("peak RSS %d bytes, over the bound of %d the sidecar logged", hwm, logged.Bound)
	}
	cmd.Process.Signal(syscall.SIGTERM)
}

// putWide DoPuts one worker's rows, split by partition, and commits.
func putWide(ctx context.Context, fc *flightclient.Client, worker, partitions int, rows int64) error {
	b, err := demo.NewBatcher(demo.Generator{Seed: uint64(worker)}, partitions, nil)
	if err != nil {
		return err
	}
	defer b.Release()
	pw, err := fc.Put(ctx, flightclient.PutCommand{Query: "wide", Stage: 0, Worker: flightclient.WorkerID(strconv.Itoa(worker)), Attempt: "a", Partitions: partitions}, demo.Schema())
	if err != nil {
		return err
	}
	defer pw.Abort()
	var sentRows int64
	lo := int64(worker) * rows
	for _, r := range demo.Chunks(demo.Range{Lo: lo, Hi: lo + rows}, 16384) {
		for _, p := range b.Batch(r, nil) {
			if err == nil {
				err = pw.Write(p.Partition, p.Record)
				sentRows += p.Record.NumRows()
			}
			p.Record.Release()
		}
		if err != nil {
			return err
		}
	}
	res, err := pw.Commit()
	if err != nil {
		return err
	}
	if !res.Committed || res.Rows != sentRows {
		return fmt.Errorf("PutResult %+v, sent %d rows", res, sentRows)
	}
	return nil
}

// vmHWM reads a process's peak resident set size from /proc.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
