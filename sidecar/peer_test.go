package sidecar_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/peer"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestLibraryReaderUsesPeers: a library client without a memory store,
// given a peer client, reads a stage a sidecar holds from that sidecar:
// every row, and no data GET (only the stage manifest and its index).
func TestLibraryReaderUsesPeers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ep := testenv.Embedded(t)
	e := newEnv(t, ep, envOptions{listen: addr, cfg: func(c *durashuffle.Config) {
		c.Sidecar.MemoryStoreBytes = 64 * durashuffle.MiB
		c.Sidecar.AdvertiseAddr = addr
		c.Sidecar.AuthToken = "peer-token-0123456789"
	}})
	ctx, cancel := context.WithTimeout(withToken(context.Background(), e.cfg.Sidecar.AuthToken), time.Minute)
	defer cancel()
	var want []row
	var bs []partBatch
	for b := range 4 {
		rec, rows := genBatch("0", int32(b), 2000, 64)
		bs = append(bs, partBatch{b % 2, rec})
		want = append(want, rows...)
	}
	if _, err := putWorker(ctx, e.sc, flightclient.PutCommand{Query: "peers", Worker: "0", Attempt: "a", Partitions: 2}, slices.Values(bs)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sc.Seal(ctx, "peers", 0, 1); err != nil {
		t.Fatal(err)
	}

	// The library client: same bucket and prefix, no memory store.
	cfg := e.cfg
	cfg.Sidecar.MemoryStoreBytes, cfg.Sidecar.AdvertiseAddr = 0, ""
	st, counter := ep.NewStore(t)
	m := metrics.New()
	c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter), durashuffle.WithObserver(m))
	defer c.Close()
	for _, tc := range []struct {
		name  string
		token string
		peers bool
	}{{"peer", e.cfg.Sidecar.AuthToken, true}, {"wrong token", "another-token-0123456789", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := peer.New(peer.Options{Token: tc.token})
			defer p.Close()
			c.UsePeers(p)
			defer c.UsePeers(nil)
			stg, err := c.OpenStage(ctx, "peers", 0)
			if err != nil {
				t.Fatal(err)
			}
			before := counter.Requests()["GetObject"]
			peerBefore, s3Before := served(t, m, "peer"), served(t, m, "s3")
			recs, err := stg.ReadPartitions(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			for recs.Next() {
				n += len(rowsOf(recs.RecordBatch()))
			}
			err = recs.Err()
			recs.Release()
			if err != nil || n != len(want) {
				t.Fatalf("read %d rows (%v), want %d", n, err, len(want))
			}
			gets := counter.Requests()["GetObject"] - before
			t.Logf("%s: %d GETs (metadata included)", tc.name, gets)
			fromPeer, fromS3 := served(t, m, "peer")-peerBefore, served(t, m, "s3")-s3Before
			if tc.peers && (fromPeer == 0 || fromS3 != 0) {
				t.Fatalf("through a peer: %v bytes from the peer, %v from s3, %d GETs", fromPeer, fromS3, gets)
			}
			if !tc.peers && (fromPeer != 0 || fromS3 == 0 || gets == 0) {
				t.Fatalf("peer refusing: %v bytes from the peer, %v from s3, %d GETs", fromPeer, fromS3, gets)
			}
		})
	}
}

// served reads durashuffle_served_bytes_total{source} from m.
func served(t *testing.T, m *metrics.Metrics, source string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != metrics.ServedBytesTotal {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("%s{source=%q} not exported", metrics.ServedBytesTotal, source)
	return 0
}
