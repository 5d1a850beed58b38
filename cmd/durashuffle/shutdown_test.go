package main

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestSIGTERMWithinGraceOnDeadStore: a sidecar whose store accepts
// connections and never answers, with a DoPut waiting on its commit,
// ends within --shutdown-grace of a SIGTERM: the stream is cut off, its
// abort (which the store does not answer either) is given up at the end
// of the grace, and the process exits 1 saying so, instead of waiting on
// the store's timeouts and retries.
func TestSIGTERMWithinGraceOnDeadStore(t *testing.T) {
	t.Parallel()
	stall := testenv.NewStall(t)
	flightAddr := freePort(t)
	const grace = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stderr := &syncBuffer{}
	cmd := exec.CommandContext(ctx, bin, "serve", "--endpoint", "http://"+stall.Addr, "--bucket", "b", "--path-style",
		"--listen", flightAddr, "--metrics-listen", "", "--shutdown-grace", grace.String())
	cmd.Env = baseEnv([]string{"AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "DURASHUFFLE_CLEANUP_TIMEOUT=20s"})
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", flightAddr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not listening after 30 s: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	fc, err := flightclient.Dial(flightAddr, flightclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	put := make(chan error, 1)
	go func() { put <- putOneBatch(ctx, fc, "q-dead") }()
	// The commit waits on the store: the sidecar has connected to it.
	for deadline := time.Now().Add(30 * time.Second); stall.Accepted() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar never reached the store\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("serve after SIGTERM: %v, want exit 1\n%s", werr, stderr.String())
	}
	if took > grace+time.Second {
		t.Fatalf("serve took %v to exit after SIGTERM, grace %v\n%s", took, grace, stderr.String())
	}
	if err := <-put; err == nil {
		t.Fatal("the DoPut committed on a store that never answered")
	}
	for _, want := range []string{"calls still running at the end of the grace"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, stderr.String())
		}
	}
	t.Logf("exited 1 %v after SIGTERM (grace %v)", took.Round(time.Millisecond), grace)
}
