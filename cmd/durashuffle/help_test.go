package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/spf13/pflag"
)

// runHere runs the command line in this process: the build without the
// bench, as go run ./cmd/durashuffle (make run) builds it.
func runHere(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var so, se bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(""), &so, &se, func(string) string { return "" })
	return so.String(), se.String(), code
}

// helpFlags returns the long flags a help text lists in its flag
// sections ("Flags:", the configuration flags by use, "Global Flags:"),
// not from its prose or examples.
func helpFlags(help string) map[string]bool {
	out := map[string]bool{}
	in := false
	for line := range strings.SplitSeq(help, "\n") {
		switch {
		case line == "Flags:" || line == "Global Flags:" || strings.HasPrefix(line, "Configuration flags"):
			in = true
			continue
		case !strings.HasPrefix(line, " "):
			in = false
		}
		if !in {
			continue
		}
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "--") {
				name, _, _ := strings.Cut(f, "[")
				out[name] = true
			}
		}
	}
	return out
}

// flagLines returns the lines of help's "Flags:" and "Global Flags:"
// sections.
func flagLines(help string) []string {
	var out []string
	in := false
	for line := range strings.SplitSeq(help, "\n") {
		switch {
		case line == "Flags:" || line == "Global Flags:":
			in = true
			continue
		case !strings.HasPrefix(line, " "):
			in = false
		}
		if in {
			out = append(out, line)
		}
	}
	return out
}

// Every flag's help is one line, and the configuration keys' flags are
// listed by name, their meaning left to docs/configuration.md, so that
// demo's help fits on one screen of 40 lines.
func TestHelpIsOneLinePerFlag(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"demo"}, {"write"}, {"seal"}, {"read"}, {"inspect"}, {"ls"}, {"gc"}, {"delete-query"}, {"serve"}, {"bench", "write"}} {
		r := cli(t, nil, nil, append(args, "--help")...).must(t)
		lines := flagLines(r.stdout)
		if len(lines) == 0 {
			t.Errorf("%s --help has no flag lines:\n%s", strings.Join(args, " "), r.stdout)
		}
		for _, l := range lines {
			if f := strings.Fields(l); len(f) == 0 || !strings.HasPrefix(f[0], "-") {
				t.Errorf("%s --help: a flag's help runs past its line: %q", strings.Join(args, " "), l)
			}
		}
		if !strings.Contains(r.stdout, "docs/configuration.md") {
			t.Errorf("%s --help does not point to docs/configuration.md:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	demo, _, _ := runHere(t, "demo", "--help")
	if n := strings.Count(strings.TrimRight(demo, "\n"), "\n") + 1; n > 40 {
		t.Errorf("demo --help is %d lines, want at most 40 (one screen):\n%s", n, demo)
	}
}

// Each command's help lists the flags of the configuration keys it uses
// and none of the others: seal has no --chunk-size, read no
// --compression, only serve has the sidecar's.
func TestCommandHelpListsItsOwnFlags(t *testing.T) {
	t.Parallel()
	store := []string{"--config", "--bucket", "--prefix", "--endpoint", "--region", "--path-style", "--ca-file",
		"--retry-max-attempts", "--connect-timeout", "--first-byte-timeout", "--log-level"}
	write := []string{"--chunk-size", "--upload-concurrency", "--max-buffered-chunks", "--frame-target-bytes",
		"--coalesce-budget", "--compression", "--encode-concurrency", "--memory-limit", "--checksum", "--cleanup-timeout", "--key-spread"}
	put := []string{"--sse", "--sse-kms-key-id", "--commit-guard"}
	read := []string{"--read-range-bytes", "--read-ahead", "--read-gap-bytes"}
	hedge := []string{"--hedge-factor", "--hedge-min-delay"}
	sidecar := []string{"--listen", "--metrics-listen", "--max-streams", "--tls-cert-file", "--memory-store-bytes", "--advertise-addr"}
	cat := func(lists ...[]string) []string { return slices.Concat(lists...) }
	for _, tc := range []struct {
		args       []string
		has, lacks []string
	}{
		{[]string{"seal", "--help"}, cat(store, put, []string{"--workers"}),
			cat(write, read, hedge, sidecar, []string{"--results-retention", "--auth-token"})},
		{[]string{"ls", "--help"}, store,
			cat(put, write, read, hedge, sidecar, []string{"--results-retention", "--auth-token"})},
		{[]string{"delete-query", "--help"}, store,
			cat(put, write, read, hedge, sidecar, []string{"--results-retention", "--auth-token"})},
		{[]string{"gc", "--help"}, cat(store, []string{"--results-retention", "--older-than"}),
			cat(put, write, read, hedge, sidecar, []string{"--auth-token"})},
		{[]string{"inspect", "--help"}, cat(store, []string{"--sidecar", "--auth-token"}),
			cat(put, write, read, hedge, sidecar, []string{"--results-retention"})},
		{[]string{"read", "--help"}, cat(store, read, hedge, []string{"--order"}),
			cat(put, write, sidecar, []string{"--results-retention", "--auth-token"})},
		{[]string{"write", "--help"}, cat(store, put, write, hedge, []string{"--partition-by"}),
			cat(read, sidecar, []string{"--results-retention", "--auth-token"})},
		{[]string{"demo", "--help"}, cat(store, put, write, read, hedge, []string{"--read-partitions"}),
			cat(sidecar, []string{"--results-retention", "--auth-token"})},
		{[]string{"serve", "--help"}, cat(store, put, write, read, hedge, sidecar,
			[]string{"--results-retention", "--auth-token", "--embedded-s3", "--embedded-s3-listen"}), nil},
		// The bench's scenarios take its flags (the binary built with it).
		{[]string{"bench", "write", "--help"}, cat(store, put, write, read, hedge, []string{"--latency"}),
			cat(sidecar, []string{"--results-retention", "--auth-token"})},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			r := cli(t, nil, nil, tc.args...).must(t)
			got := helpFlags(r.stdout)
			for _, f := range tc.has {
				if !got[f] {
					t.Errorf("%s does not list %s:\n%s", strings.Join(tc.args, " "), f, r.stdout)
				}
			}
			for _, f := range tc.lacks {
				if got[f] {
					t.Errorf("%s lists %s, a key it does not use:\n%s", strings.Join(tc.args, " "), f, r.stdout)
				}
			}
		})
	}
	root, _, _ := runHere(t, "--help")
	if got := helpFlags(root); got["--chunk-size"] || got["--bucket"] {
		t.Errorf("the root's help lists the configuration flags of the commands:\n%s", root)
	}
}

// Every key has a use, and every command's help lists exactly the keys of
// its uses: a key added to Config without a use would have no flag.
func TestEveryKeyHasAUse(t *testing.T) {
	keys := Keys()
	for _, k := range keys {
		if keyUses[k.Name] == 0 {
			t.Errorf("key %s has no use in keyUses: no command would take --%s", k.Name, k.Flag)
		}
	}
	if len(keyUses) != len(keys) {
		t.Errorf("keyUses has %d keys, Config %d: a name in keyUses is not a key", len(keyUses), len(keys))
	}
	for name, uses := range commandUses {
		if name == "bench" {
			continue // a stand-in in this build; TestCommandHelpListsItsOwnFlags runs the real one
		}
		help, _, code := runHere(t, name, "--help")
		if code != exitOK {
			t.Fatalf("%s --help: exit %d", name, code)
		}
		got := helpFlags(help)
		for _, k := range keys {
			if want := keyUses[k.Name]&uses != 0; got["--"+k.Flag] != want {
				t.Errorf("%s --help lists --%s: %v, want %v", name, k.Flag, got["--"+k.Flag], want)
			}
		}
	}
}

// A config file and the environment shared by every command may hold any
// key: each command reads them all, whichever flags it has.
func TestEveryCommandReadsEveryKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "shared.yaml")
	if err := os.WriteFile(file, []byte("bucket: shared\nchunk_size: 16MiB\nread_ahead: 7\nlisten: 127.0.0.1:9\n"+
		"results_retention: 3h\nauth_token: s3cret\ncommit_guard: off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DURASHUFFLE_MAX_STREAMS": "5", "DURASHUFFLE_HEDGE_FACTOR": "0"}
	for name, uses := range commandUses {
		fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
		f := bindConfigFlags(fs, uses)
		if err := fs.Parse([]string{"--config", file}); err != nil {
			t.Fatal(err)
		}
		c, err := f.Load(func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Store.Bucket != "shared" || c.Write.ChunkSize != 16*durashuffle.MiB || c.Read.Ahead != 7 || c.Sidecar.Listen != "127.0.0.1:9" ||
			c.GC.ResultsRetention.D() != 3*time.Hour || c.Sidecar.AuthToken != "s3cret" || c.Store.CommitGuard != "off" ||
			c.Sidecar.MaxStreams != 5 || c.Hedge.Factor != 0 {
			t.Errorf("%s read the shared file and environment as %+v", name, c)
		}
	}
}

// A usage error names the help of the command that was given.
func TestUsageErrorNamesTheCommandsHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		help string
	}{
		{[]string{"write", "--no-such-flag"}, "durashuffle write --help"},
		{[]string{"write", "--listen", "127.0.0.1:1"}, "durashuffle write --help"},
		{[]string{"seal", "--chunk-size", "8MiB"}, "durashuffle seal --help"},
		{[]string{"read", "--compression", "zstd"}, "durashuffle read --help"},
		{[]string{"ls", "extra"}, "durashuffle ls --help"},
		{[]string{"no-such-command"}, "durashuffle --help"},
	} {
		_, stderr, code := runHere(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, "Run '"+tc.help+"' for usage.") {
			t.Errorf("%q: exit %d, want %d and a pointer to %q:\n%s", tc.args, code, exitUsage, tc.help, stderr)
		}
	}
}

// The build make run runs leaves the bench and its modules out, and its
// bench command says how to get it.
func TestDemoBuildLeavesTheBenchOut(t *testing.T) {
	modules := func(tags ...string) string {
		args := append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}"}, tags...)
		out, err := exec.Command("go", append(args, ".")...).Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	benchOnly := []string{"gonum.org/v1/plot", "codeberg.org/go-fonts/liberation", "git.sr.ht/~sbinet/gg", "github.com/Shopify/toxiproxy/v2", "github.com/google/pprof"}
	demo, full := modules(), modules("-tags", "bench")
	for _, m := range benchOnly {
		if strings.Contains(demo, m+"\n") {
			t.Errorf("go run ./cmd/durashuffle builds %s, which only the bench needs", m)
		}
		if !strings.Contains(full, m+"\n") {
			t.Errorf("-tags bench does not build %s: is it still the bench's?", m)
		}
	}
	_, stderr, code := runHere(t, "bench", "write", "--rounds", "1")
	if code != exitFailure || !strings.Contains(stderr, "make build") || !strings.Contains(stderr, "-tags bench") {
		t.Errorf("bench in a build without it: exit %d, want %d and how to build it:\n%s", code, exitFailure, stderr)
	}
}
