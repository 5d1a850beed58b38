package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestUsageErrors checks that mistakes in the command line, the
// configuration or an ID exit 2 before any request is made.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	url, requests := countingServer(t)
	target := []string{"--endpoint", url, "--path-style", "--bucket", "b"}
	creds := []string{"AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string // in stderr
	}{
		{"invalid query ID", nil, []string{"inspect", "--query", "bad/id"}, "invalid id: query ID"},
		{"query ID too long", nil, []string{"read", "--query", strings.Repeat("q", 129), "--format", "jsonl"}, "at most 128"},
		{"dot query", nil, []string{"ls", "--query", ".."}, "not allowed"},
		{"invalid worker ID", nil, []string{"write", "-q", "q", "-w", "a b", "--partitions", "1"}, "worker ID"},
		{"invalid attempt ID", nil, []string{"write", "-q", "q", "-w", "0", "--attempt", "x/y", "--partitions", "1"}, "attempt ID"},
		{"negative stage", nil, []string{"seal", "-q", "q", "--stage", "-1", "--workers", "1"}, "stage -1"},
		{"demo query ID", nil, []string{"demo", "--query", "no spaces"}, "invalid id"},
		{"chunk size flag", nil, []string{"write", "-q", "q", "-w", "0", "--partitions", "1", "--chunk-size", "1MiB"}, "chunk_size must be between 5MiB and 5GiB, got 1MiB"},
		{"chunk size env", []string{"DURASHUFFLE_CHUNK_SIZE=1MiB"}, []string{"ls"}, "chunk_size"},
		{"demo chunk size", nil, []string{"demo", "--chunk-size", "1MiB"}, "chunk_size"},
		{"bad size", nil, []string{"write", "-q", "q", "-w", "0", "--partitions", "1", "--chunk-size", "lots"}, "invalid argument"},
		{"a flag of another command", nil, []string{"ls", "--chunk-size", "8MiB"}, "unknown flag: --chunk-size"},
		{"missing config file", nil, []string{"ls", "--config", "/nonexistent/durashuffle.yaml"}, "config file"},
		{"unknown flag", nil, []string{"ls", "--nope"}, "unknown flag: --nope"},
		{"unknown command", nil, []string{"shuffle"}, `unknown command "shuffle"`},
		{"extra argument", nil, []string{"ls", "extra"}, "takes no arguments"},
		{"missing query", nil, []string{"inspect"}, "--query is required"},
		{"missing workers", nil, []string{"seal", "-q", "q"}, "--workers must be at least 1"},
		{"missing partition-by", nil, []string{"write", "-q", "q", "-w", "0", "--partitions", "4"}, "--partition-by is required"},
		{"both partition flags", nil, []string{"read", "-q", "q", "--partition", "1", "--partitions", "0-3"}, "mutually exclusive"},
		{"bad partition range", nil, []string{"read", "-q", "q", "--partitions", "5-2"}, "A <= B"},
		{"bad format", nil, []string{"read", "-q", "q", "--format", "parquet"}, "--format"},
		{"negative offset", nil, []string{"read", "-q", "q", "--offset", "-5"}, "--offset"},
		{"bad log format", nil, []string{"ls", "--log-format", "xml"}, "--log-format"},
		{"bad log level", nil, []string{"ls", "--log-level", "loud"}, "--log-level"},
		{"demo rows", nil, []string{"demo", "--rows", "0"}, "--rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := requests.Load()
			r := cli(t, append(creds, tc.env...), nil, append(tc.args, target...)...)
			if r.code != 2 {
				t.Fatalf("exit code %d, want 2\nstderr:\n%s", r.code, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "durashuffle: ") || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr does not say %q after \"durashuffle: \":\n%s", tc.want, r.stderr)
			}
			if n := requests.Load() - before; n != 0 {
				t.Fatalf("%d requests reached the server", n)
			}
		})
	}
}

// TestFailures checks errors that are not the user's: exit 1 with a
// message that says what is wrong.
func TestFailures(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[0])
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"read missing stage", []string{"read", "-q", "nosuch", "-s", "0", "--format", "jsonl"}, []string{"stage not found", "nosuch stage 0"}},
		{"inspect missing stage", []string{"inspect", "-q", "nosuch", "-s", "3"}, []string{"stage not found"}},
		{"seal missing workers", []string{"seal", "-q", "nosuch", "-s", "0", "--workers", "3"}, []string{"3 of 3 workers have no manifest: 0, 1, 2"}},
		{"write missing input", []string{"write", "-q", "q", "-w", "0", "--partitions", "1", "-i", "/nonexistent.arrow"}, []string{"no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tg.run(t, nil, tc.args...)
			if r.code != 1 {
				t.Fatalf("exit code %d, want 1\nstderr:\n%s", r.code, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Fatalf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}

	t.Run("not arrow on stdin", func(t *testing.T) {
		r := tg.run(t, []byte("id,name\n1,a\n"), "write", "-q", "q", "-w", "0", "--partitions", "1")
		if r.code != 1 || !strings.Contains(r.stderr, "Arrow IPC stream") {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	})
	t.Run("unknown partition column", func(t *testing.T) {
		in := arrowStream(t, testBatches(t, 0, 10, 10))
		r := tg.run(t, in, "write", "-q", "q", "-w", "0", "--partitions", "2", "--partition-by", "nope")
		if r.code != 2 || !strings.Contains(r.stderr, `no such column`) {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	})
	t.Run("partition by a list column", func(t *testing.T) {
		in := arrowStream(t, testBatches(t, 0, 10, 10))
		r := tg.run(t, in, "write", "-q", "q", "-w", "0", "--partitions", "2", "--partition-by", "tags")
		if r.code != 2 || !strings.Contains(r.stderr, "cannot partition by a column of type list") {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		// Nothing committed, nothing left half-uploaded.
		st, _ := tg.ep.NewStore(t)
		ups, err := st.ListUploads(t.Context(), "")
		if err != nil || len(ups) != 0 {
			t.Fatalf("uploads %v, err %v", ups, err)
		}
	})
}

// TestEveryCommandHasAnExample walks the whole command tree: every
// command a user can run shows an example in its --help.
func TestEveryCommandHasAnExample(t *testing.T) {
	t.Parallel()
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.Runnable() {
				n++
				if strings.TrimSpace(sub.Example) == "" {
					t.Errorf("%q has no example in its --help", sub.CommandPath())
				}
			}
			walk(sub)
		}
	}
	walk(a.rootCommand())
	if n < runnableCommands {
		t.Fatalf("walked %d runnable commands, want every one (at least %d)", n, runnableCommands)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"demo", "write", "seal", "read", "inspect", "ls"} {
		t.Run(cmd, func(t *testing.T) {
			r := cli(t, nil, nil, cmd, "--help").must(t)
			for _, want := range []string{"Usage:", "Examples:", "  durashuffle " + cmd, "--endpoint", "--bucket", "--prefix", "--config", "--log-format"} {
				if !strings.Contains(r.stdout, want) {
					t.Fatalf("%s --help lacks %q:\n%s", cmd, want, r.stdout)
				}
			}
		})
	}
	r := cli(t, nil, nil, "--help").must(t)
	for _, want := range []string{"Exit codes", "demo", "write", "seal", "read", "inspect", "ls"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--help lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestLogFormatJSON(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, nil, "demo", "--rows", "1000", "--workers", "1", "--partitions", "2", "--log-format", "json").must(t)
	first := strings.SplitN(r.stderr, "\n", 2)[0]
	if !strings.HasPrefix(first, `{"time":`) || !strings.Contains(first, `"level":"INFO"`) {
		t.Fatalf("stderr is not JSON logs:\n%s", r.stderr)
	}
}
