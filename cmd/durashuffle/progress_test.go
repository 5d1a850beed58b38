package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

// onTerminal runs the binary with stderr on a pseudo-terminal (stdout and
// stdin stay plain) and returns everything the terminal received.
func onTerminal(t *testing.T, env []string, args ...string) (stdout, term string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 160}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		// Drain the terminal while the command runs, or it blocks once
		// the pty's buffer is full. Reads end with EIO when the last
		// handle on the other side is closed.
		b := make([]byte, 32<<10)
		for {
			n, err := ptmx.Read(b)
			mu.Lock()
			out.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = baseEnv(append(env, "TERM=xterm"))
	var so bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, tty
	err = cmd.Run()
	tty.Close()
	wg.Wait()
	mu.Lock()
	term = out.String()
	mu.Unlock()
	if err != nil {
		t.Fatalf("durashuffle %s: %v\nterminal:\n%s", strings.Join(args, " "), err, term)
	}
	return so.String(), term
}

// barText is what the bars draw and nothing else prints.
var barText = []string{"parts in flight", "encoded", "ETA", "MiB/s", "\x1b["}

func TestProgressOnTerminal(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backend{"embedded", testenv.Embedded})

	t.Run("demo", func(t *testing.T) {
		stdout, term := onTerminal(t, nil, "demo", "--rows", "100000", "--workers", "2", "--partitions", "8")
		for _, want := range []string{"write ", "100.0k / 100.0k rows", "100%", "ETA", "encoded", "upload",
			"parts in flight", "/8", "buffers", "MiB/s", "read", "GETs", "msg=writing"} {
			if !strings.Contains(term, want) {
				t.Errorf("terminal lacks %q:\n%s", want, term)
			}
		}
		if !strings.Contains(stdout, "verified row counts") || strings.Contains(stdout, "parts in flight") {
			t.Errorf("stdout is not just the summary:\n%s", stdout)
		}
	})

	const q = "q-progress"
	t.Run("write", func(t *testing.T) {
		// An Arrow IPC file: read with ReadAt, counted all the same.
		file := arrowFile(t, testBatches(t, 0, 20000, 1000))
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		stdout, term := onTerminal(t, tg.env, append([]string{"write", "-q", q, "-s", "0", "-w", "0",
			"--partitions", "4", "--partition-by", "id", "-i", file}, tg.flags...)...)
		for _, want := range []string{"input", "/ " + mib(fi.Size()), "100%", "encoded", "upload", "parts in flight"} {
			if !strings.Contains(term, want) {
				t.Errorf("terminal lacks %q:\n%s", want, term)
			}
		}
		if !strings.Contains(stdout, "committed "+q) {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("read", func(t *testing.T) {
		tg.run(t, nil, "seal", "-q", q, "-s", "0", "--workers", "1").must(t)
		st, _ := tg.ep.NewStore(t)
		m, err := manifest.LoadStage(context.Background(), st, manifest.Layout{Prefix: "durashuffle"}, q, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "p.arrows")
		_, term := onTerminal(t, tg.env, append([]string{"read", "-q", q, "-s", "0", "--partitions", "0-3", "-o", out}, tg.flags...)...)
		// The total is the stored bytes of every frame, from the manifest.
		total := mib(m.Totals.BytesStored)
		for _, want := range []string{"read", total + " / " + total + " stored", "100%", "20.0k rows", "GETs"} {
			if !strings.Contains(term, want) {
				t.Errorf("terminal lacks %q:\n%s", want, term)
			}
		}
		if _, got := readArrowStream(t, mustRead(t, out)); len(got) != 20000 {
			t.Errorf("read %d rows, want 20000", len(got))
		}
	})

	t.Run("quiet", func(t *testing.T) {
		stdout, term := onTerminal(t, nil, "demo", "--quiet", "--rows", "50000", "--workers", "1", "--partitions", "4")
		for _, bar := range barText {
			if strings.Contains(term, bar) {
				t.Errorf("--quiet, yet the terminal shows %q:\n%s", bar, term)
			}
		}
		if !strings.Contains(term, "msg=writing") || !strings.Contains(stdout, "verified") {
			t.Errorf("--quiet lost the logs or the summary:\nterminal:\n%s\nstdout:\n%s", term, stdout)
		}
	})
}

func TestNoProgressWithoutTerminal(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backend{"embedded", testenv.Embedded})
	file := arrowFile(t, testBatches(t, 0, 5000, 1000))
	out := filepath.Join(t.TempDir(), "p.arrows")
	// stderr is a pipe in every run, as in every other test here.
	for _, args := range [][]string{
		{"demo", "--rows", "50000", "--workers", "1", "--partitions", "4"},
		append([]string{"write", "-q", "q", "-s", "0", "-w", "0", "--partitions", "2", "--partition-by", "id", "-i", file}, tg.flags...),
		append([]string{"seal", "-q", "q", "-s", "0", "--workers", "1"}, tg.flags...),
		append([]string{"read", "-q", "q", "-s", "0", "--partitions", "0-1", "-o", out}, tg.flags...),
	} {
		r := cli(t, tg.env, nil, args...).must(t)
		for _, bar := range barText {
			if strings.Contains(r.stderr, bar) {
				t.Errorf("%s: stderr is not a terminal, yet shows %q:\n%s", args[0], bar, r.stderr)
			}
		}
		if args[0] != "seal" && !strings.Contains(r.stderr, "level=INFO") {
			t.Errorf("%s: logs missing from stderr:\n%s", args[0], r.stderr)
		}
	}
}

// benchArgs is a bench write at the smallest useful size: 16 MiB over
// the default link, each contender running for a second or more.
var benchArgs = []string{"bench", "write", "--stored", "16MiB", "--rounds", "1", "--partitions", "8"}

func TestBenchProgressOnTerminal(t *testing.T) {
	t.Parallel()
	stdout, term := onTerminal(t, nil, benchArgs...)
	// The scenario bar names each run; the child's bar what it moved.
	for _, want := range []string{"round 1/1 durashuffle, run 1 of 8", "round 1/1 durashuffle-encrypted, run 2 of 8",
		"round 1/1 durashuffle-auto, run 3 of 8", "round 1/1 durashuffle-spill-off, run 4 of 8", "round 1/1 durashuffle-encode-only, run 5 of 8",
		"round 1/1 sequential, run 6 of 8", "round 1/1 transfermanager, run 7 of 8", "round 1/1 manager, run 8 of 8",
		"preparing (encode-files durashuffle)", "8 runs done", "took ",
		"ETA", "MiB encoded", "parts in flight", "buffers", "MiB/s"} {
		if !strings.Contains(term, want) {
			t.Errorf("terminal lacks %q:\n%s", want, term)
		}
	}
	// Some bar showed bytes on their way, out of a known total.
	var moving bool
	for _, m := range regexp.MustCompile(`(\d+\.\d) MiB / \d+\.\d MiB uploaded`).FindAllStringSubmatch(term, -1) {
		if f, _ := strconv.ParseFloat(m[1], 64); f > 0 {
			moving = true
		}
	}
	if !moving {
		t.Errorf("no bar showed bytes uploaded:\n%s", term)
	}
	// Log lines print whole, above the bars.
	if !regexp.MustCompile(`(?m)^(\x1b\[\d*A\x1b\[J)?  round 1 sequential +\d+\.\d+ s`).MatchString(term) {
		t.Errorf("the round log line is not on a line of its own:\n%s", term)
	}
	if !strings.Contains(stdout, "durashuffle bench write") || !strings.Contains(stdout, "transfermanager") ||
		strings.Contains(stdout, "\x1b[") || strings.Contains(stdout, "runs done") {
		t.Errorf("stdout is not just the report:\n%s", stdout)
	}
}

func TestNoBenchProgress(t *testing.T) {
	t.Parallel()
	bars := []string{"\x1b[", "run 1 of 8", "runs done", "MiB uploaded", "in flight", "ETA"}
	check := func(t *testing.T, how, stdout, stderr string) {
		for _, bar := range bars {
			if strings.Contains(stderr, bar) {
				t.Errorf("%s, yet stderr shows %q:\n%s", how, bar, stderr)
			}
		}
		if !strings.Contains(stderr, "  round 1 transfermanager ") || !strings.Contains(stdout, "durashuffle bench write") {
			t.Errorf("%s: the log or the report is missing:\nstderr:\n%s\nstdout:\n%s", how, stderr, stdout)
		}
	}
	t.Run("quiet", func(t *testing.T) {
		t.Parallel()
		stdout, term := onTerminal(t, nil, slices.Concat(benchArgs, []string{"--quiet"})...)
		check(t, "--quiet", stdout, term)
	})
	t.Run("pipe", func(t *testing.T) {
		t.Parallel()
		r := cli(t, nil, nil, benchArgs...).must(t)
		check(t, "stderr is a pipe", r.stdout, r.stderr)
	})
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestArrowToDevNullNotATerminal: `read --format arrow > /dev/null` writes
// (a character device is not a terminal), and stdout on a pseudo-terminal
// is refused with exit 2: one terminal check for read and the progress bars.
func TestArrowToDevNullNotATerminal(t *testing.T) {
	tg := newTarget(t, backends[0])
	tg.run(t, nil, "demo", "--query", "devnull", "--rows", "2000", "--workers", "1", "--partitions", "2", "--quiet").must(t)
	args := append([]string{"read", "--query", "devnull", "--stage", "0", "--partition", "1"}, tg.flags...)

	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = baseEnv(tg.env)
	cmd.Stdout = null
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("read --format arrow > /dev/null: %v\n%s", err, se.String())
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	defer ptmx.Close()
	go io.Copy(io.Discard, ptmx)
	cmd = exec.Command(bin, args...)
	cmd.Env = baseEnv(tg.env)
	cmd.Stdout = tty
	se.Reset()
	cmd.Stderr = &se
	err = cmd.Run()
	tty.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(se.String(), "to a terminal") {
		t.Fatalf("read --format arrow to a terminal: %v, stderr %q; want exit 2 refusing", err, se.String())
	}
}
