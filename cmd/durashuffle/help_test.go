package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// runHere runs the command line in this process: the build without the
// bench, as go run ./cmd/durashuffle (make run) builds it.
func runHere(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var so, se bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(""), &so, &se, func(string) string { return "" })
	return so.String(), se.String(), code
}

// Each command's help lists its own flags: the sidecar's only on serve.
func TestCommandHelpListsItsOwnFlags(t *testing.T) {
	write, _, code := runHere(t, "write", "--help")
	if code != exitOK {
		t.Fatalf("write --help: exit %d", code)
	}
	for _, f := range []string{"--listen", "--auth-token", "--max-streams", "--tls-cert-file", "--embedded-s3-listen"} {
		if strings.Contains(write, f+" ") {
			t.Errorf("write --help lists %s, a flag of serve:\n%s", f, write)
		}
	}
	for _, f := range []string{"--chunk-size", "--bucket", "--endpoint", "--config", "--log-level"} {
		if !strings.Contains(write, f+" ") {
			t.Errorf("write --help does not list %s:\n%s", f, write)
		}
	}
	serve, _, _ := runHere(t, "serve", "--help")
	for _, f := range []string{"--listen", "--auth-token", "--embedded-s3", "--embedded-s3-listen", "--chunk-size"} {
		if !strings.Contains(serve, f+" ") {
			t.Errorf("serve --help does not list %s:\n%s", f, serve)
		}
	}
	root, _, _ := runHere(t, "--help")
	if strings.Contains(root, "--chunk-size") {
		t.Errorf("the root's help lists the configuration flags of the commands:\n%s", root)
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
	benchOnly := []string{"gonum.org/v1/plot", "codeberg.org/go-fonts/liberation", "git.sr.ht/~sbinet/gg", "github.com/Shopify/toxiproxy/v2"}
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
