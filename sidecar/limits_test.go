package sidecar_test

import (
	"context"
	"net"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/sidecar"
)

// TestLoopbackByDefault: the default listen addresses accept local
// callers only, and IsLoopback (which makes `serve` warn about listening
// beyond loopback without a token) tells loopback from the rest.
func TestLoopbackByDefault(t *testing.T) {
	d := durashuffle.DefaultConfig()
	for _, addr := range []string{d.Sidecar.Listen, d.Sidecar.MetricsListen} {
		if !sidecar.IsLoopback(addr) {
			t.Fatalf("default address %q is not loopback", addr)
		}
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:8815": true, "127.0.0.2:1": true, "[::1]:8815": true, "localhost:8815": true, "unix:/run/ds.sock": true,
		"0.0.0.0:8815": false, ":8815": false, "[::]:8815": false, "10.1.2.3:8815": false, "example.com:8815": false, "nonsense": false,
	} {
		if got := sidecar.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
	// The default host really binds loopback only.
	host, _, _ := net.SplitHostPort(d.Sidecar.Listen)
	ln, err := sidecar.Listen(net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Fatalf("listening on %v", ip)
	}
	if _, err := sidecar.Listen(""); err == nil {
		t.Fatal("an empty listen address was accepted (it would mean every interface)")
	}
}

// TestMessageSizeLimit: with max_message_bytes 1 MiB, a DoPut message over
// it is refused (ResourceExhausted, naming both sizes) and commits nothing;
// messages under it go through, and DoGet cuts frames coalesced past the
// limit (frame_target_bytes 4 MiB here) into batches that fit.
func TestMessageSizeLimit(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t), envOptions{cfg: func(c *durashuffle.Config) {
		c.Sidecar.MaxMessageBytes = 1 * durashuffle.MiB
		c.Write.FrameTargetBytes = 4 * durashuffle.MiB
		c.Write.CoalesceBudget = 16 * durashuffle.MiB
	}})
	ctx := context.Background()
	big, _ := genBatch("w", 0, 2000, 1024) // ~2 MiB in one FlightData message
	_, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: "q-big", Worker: "w", Partitions: 2}, slices.Values([]partBatch{{0, big}}))
	wantCode(t, err, codes.ResourceExhausted, "larger than max", "vs. 1048576")
	e.nothingLeft("q-big", 0, "w")

	var want []row
	var bs []partBatch
	for b := range 4 {
		rec, rows := genBatch("w", int32(b), 600, 1024) // ~650 KiB each
		bs = append(bs, partBatch{0, rec})
		want = append(want, rows...)
	}
	res, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: "q-ok", Worker: "0", Partitions: 1}, slices.Values(bs))
	if err != nil || !res.Committed {
		t.Fatalf("put of messages under the limit: %+v, %v", res, err)
	}
	if _, err := e.sc.Seal(ctx, "q-ok", 0, 1); err != nil {
		t.Fatal(err)
	}
	_, got, err := doGet(ctx, e.fc, map[string]any{"query": "q-ok", "stage": 0, "partition": 0})
	if err != nil || len(got) != len(want) {
		t.Fatalf("get: %d rows, want %d: %v", len(got), len(want), err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("get: %s", firstDiff(got, want))
	}
}
