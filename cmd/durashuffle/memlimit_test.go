package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
)

// memoryLimitLog is the "memory limit" line a command logs: the runtime's
// soft memory limit once the command set it (debug.SetMemoryLimit(-1)).
type memoryLimitLog struct {
	Msg    string `json:"msg"`
	Limit  int64  `json:"limit"`
	Source string `json:"source"`
}

func findMemoryLimit(t *testing.T, stderr string) memoryLimitLog {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		var l memoryLimitLog
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Msg, "memory limit: ") {
			return l
		}
	}
	t.Fatalf("no memory limit logged:\n%s", stderr)
	return memoryLimitLog{}
}

// TestMemoryLimitApplied: write, demo and serve set the process's soft
// memory limit from memory_limit, and never override GOMEMLIMIT.
func TestMemoryLimitApplied(t *testing.T) {
	tg := newTarget(t, backends[0])
	file := arrowFile(t, testBatches(t, 0, 2000, 500))
	def := durashuffle.DefaultConfig()
	auto := int64(def.SoftMemoryLimit(durashuffle.MemoryLoad{Writers: 1}))
	if auto != int64(288*durashuffle.MiB-52*durashuffle.MiB) {
		t.Fatalf("auto limit of one writer with the defaults is %d", auto)
	}
	cases := []struct {
		name   string
		env    []string
		flags  []string
		limit  int64
		source string
	}{
		{"auto", nil, nil, auto, "memory_limit auto"},
		{"flag", nil, []string{"--memory-limit", "300MiB"}, 300 << 20, "memory_limit"},
		{"env", []string{"DURASHUFFLE_MEMORY_LIMIT=400MiB"}, nil, 400 << 20, "memory_limit"},
		{"off", []string{"DURASHUFFLE_MEMORY_LIMIT=off"}, nil, 0, "off"},
		{"GOMEMLIMIT wins", []string{"GOMEMLIMIT=200MiB"}, []string{"--memory-limit", "300MiB"}, 200 << 20, "GOMEMLIMIT"},
		{"bigger chunks, bigger bound", nil, []string{"--chunk-size", "16MiB"}, auto + 16*8<<20, "memory_limit auto"},
	}
	for i, c := range cases {
		t.Run("write "+c.name, func(t *testing.T) {
			args := append([]string{"write", "--log-format", "json", "-q", "q-mem", "-s", "0", "-w", string(rune('a' + i)),
				"--partitions", "2", "--partition-by", "id", "-i", file}, c.flags...)
			r := cli(t, append(append([]string{}, tg.env...), c.env...), nil, append(args, tg.flags...)...).must(t)
			got := findMemoryLimit(t, r.stderr)
			if got.Limit != c.limit || got.Source != c.source {
				t.Fatalf("memory limit %d from %q, want %d from %q", got.Limit, got.Source, c.limit, c.source)
			}
			if c.limit == 0 && got.Msg != "memory limit: none (memory_limit off)" {
				t.Fatalf("memory_limit off logged %q", got.Msg)
			}
		})
	}

	t.Run("demo on its embedded server sets none unless told", func(t *testing.T) {
		demo := []string{"demo", "--log-format", "json", "--rows", "5000", "--workers", "1", "--partitions", "4"}
		if got := findMemoryLimit(t, cli(t, nil, nil, demo...).must(t).stderr); got.Limit != 0 || got.Source != "off" ||
			!strings.HasPrefix(got.Msg, "memory limit: none (memory_limit auto sets none with the embedded S3 server") {
			t.Fatalf("demo, embedded, auto: %+v", got)
		}
		if got := findMemoryLimit(t, cli(t, nil, nil, append(demo, "--memory-limit", "1GiB")...).must(t).stderr); got.Limit != 1<<30 {
			t.Fatalf("demo, embedded, 1GiB: %+v", got)
		}
	})

	t.Run("demo against an endpoint: writers and readers", func(t *testing.T) {
		r := cli(t, tg.env, nil, append([]string{"demo", "--log-format", "json", "--rows", "5000", "--workers", "2",
			"--read-partitions", "3", "--partitions", "4", "-q", "q-mem-demo"}, tg.flags...)...).must(t)
		want := int64(def.SoftMemoryLimit(durashuffle.MemoryLoad{Writers: 2, Readers: 3}))
		if got := findMemoryLimit(t, r.stderr); got.Limit != want {
			t.Fatalf("demo: %+v, want %d", got, want)
		}
	})

	t.Run("serve: max_streams streams share the pool", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--log-format", "json", "--listen", "127.0.0.1:0",
			"--metrics-listen", "", "--max-streams", "4"}, tg.flags...)...)
		cmd.Env = baseEnv(tg.env)
		se, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		sc := bufio.NewScanner(se)
		var log strings.Builder
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), `"memory limit: `) {
				break
			}
		}
		got := findMemoryLimit(t, log.String())
		// 16 x 8 MiB + 4 x (64 MiB coalesce_budget + 64 MiB max_message_bytes)
		// + serve's 1 GiB memory store + 96 MiB, less 52 MiB (memory_limit auto).
		want := int64(128+4*128+1024+96)<<20 - 52<<20
		if got.Limit != want || got.Source != "memory_limit auto" {
			t.Fatalf("serve: %+v, want %d", got, want)
		}
		cmd.Process.Signal(syscall.SIGTERM)
	})
}
