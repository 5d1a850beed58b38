package faulttest

import (
	"context"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// stallFor is how long the proxy holds the chosen request: far longer
// than the test may take, so only a hedge can finish it in time.
const stallFor = 5 * time.Minute

// hedgeConfig keeps the default hedging (4 x the recent p90, at least
// 2 s), so that of all the requests only the stalled one is late enough,
// and a request timeout longer than the stall, so that only a hedge can
// rescue the stalled request in time.
func hedgeConfig(t *testing.T) durashuffle.Config {
	cfg := baseConfig()
	d := durashuffle.DefaultConfig()
	cfg.Hedge.Factor, cfg.Hedge.MinDelay = d.Hedge.Factor, d.Hedge.MinDelay
	cfg.Store.RequestTimeout = durashuffle.Duration(2 * stallFor)
	if cfg.Hedge.Factor == 0 {
		t.Fatal("hedging is off by default")
	}
	return cfg
}

// TestHedgedPartUpload writes a stage to let the pool learn how long a
// part takes, then writes another with one part stalled: the second
// object's part 1. That write must finish long before the stall (or the
// request timeout) would end, with one hedge that won and exactly one
// UploadPart more than the parts it stored. The stall is on a part 1,
// never an object's last (the stage's objects have three parts each):
// over HTTPS a last part is streamed while its chunk fills and, when the
// chunk ends short, cut off and sent again whole, which ends a stall on
// it without any hedge.
func TestHedgedPartUpload(t *testing.T) {
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) {
		env := newEnv(t, e, hedgeConfig(t), faultproxy.Spec{})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		warm := stage{query: "hedge-warm", workers: 3, partitions: 8, rows: 900_000, seed: 30, reuse: true}
		if _, err := warm.write(ctx, env.client); err != nil {
			t.Fatal(err)
		}
		st0 := env.client.Stats()
		h0, w0 := st0.Hedged, st0.HedgesWon
		env.proxies[0].Stall(faultproxy.Stall{Op: "UploadPart", Nth: 2, Part: 1, Delay: stallFor})
		before := env.counter.Requests()["UploadPart"]
		resent0 := env.client.Stats().Resent
		s := stage{query: "hedged-write", workers: 3, partitions: 8, rows: 600_000, seed: 31, reuse: true}
		start := time.Now()
		want, err := s.write(ctx, env.client)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		st, err := env.client.OpenStage(ctx, s.query, 0)
		if err != nil {
			t.Fatal(err)
		}
		parts := int64(st.Manifest().Totals.Parts)
		after := env.client.Stats()
		hedged, won := after.Hedged-h0, after.HedgesWon-w0
		sent := env.counter.Requests()["UploadPart"] - before
		// Over HTTPS an object's last part may be streamed, cut off when
		// its chunk ends short, and sent again whole: not a hedge. The cut
		// request may never have reached the server (cut before it was
		// sent), so each resend adds zero or one request.
		resent := env.client.Stats().Resent - resent0
		t.Logf("write with the second part 1 stalled for %v took %v: %d parts stored, %d UploadPart requests (%d last parts resent), hedged %d, won %d",
			stallFor, took.Round(time.Millisecond), parts, sent, resent, hedged, won)
		if stalls := env.faults().ByFault()[faultproxy.FaultStall]; stalls != 1 {
			t.Fatalf("%d requests stalled, want 1", stalls)
		}
		checkHedges(t, took, hedged, won, sent-parts, resent)
		got, err := s.readStage(ctx, st)
		if err != nil || lost(want, got) != 0 {
			t.Fatalf("read back: %v, lost %d rows", err, lost(want, got))
		}
	})
}

// TestHedgedRangeRead reads a stage twice: once to learn the latency of
// its ranged GETs, then again with the 3rd GET of the pass stalled. The
// second pass must finish long before the stall would end, with one hedge
// that won and exactly one GET more than the first pass.
func TestHedgedRangeRead(t *testing.T) {
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) {
		env := newEnv(t, e, hedgeConfig(t), faultproxy.Spec{})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s := stage{query: "hedged-read", workers: 3, partitions: 8, rows: 300_000, seed: 32, reuse: true}
		want, err := s.write(ctx, env.client)
		if err != nil {
			t.Fatal(err)
		}
		st, err := env.client.OpenStage(ctx, s.query, 0)
		if err != nil {
			t.Fatal(err)
		}
		gets := func() int64 { return env.counter.Requests()["GetObject"] }
		var passGets, passHedged, passWon [2]int64
		var took [2]time.Duration
		for pass := range 2 {
			if pass == 1 {
				env.proxies[0].StallNth("GetObject", 3, stallFor)
			}
			before, start := gets(), time.Now()
			got, err := s.readStage(ctx, st)
			if err != nil || lost(want, got) != 0 {
				t.Fatalf("pass %d: %v, lost %d rows", pass, err, lost(want, got))
			}
			passGets[pass], took[pass] = gets()-before, time.Since(start)
			st := env.client.Stats()
			h, w := st.ReadsHedged, st.ReadHedgesWon
			passHedged[pass], passWon[pass] = h-passHedged[0], w-passWon[0]
		}
		hedged, won := passHedged[1], passWon[1]
		// Both passes make the same ranged GETs, plus one per hedge.
		base := passGets[0] - passHedged[0]
		t.Logf("first pass %d GETs in %v (%d hedged); second pass, 3rd GET stalled for %v: %d GETs in %v; hedged %d, won %d",
			passGets[0], took[0].Round(time.Millisecond), passHedged[0], stallFor, passGets[1], took[1].Round(time.Millisecond), hedged, won)
		if stalls := env.faults().ByFault()[faultproxy.FaultStall]; stalls != 1 {
			t.Fatalf("%d requests stalled, want 1", stalls)
		}
		if base < 8 {
			t.Fatalf("only %d GETs in the first pass: too few to warm the hedger", base)
		}
		checkHedges(t, took[1], hedged, won, passGets[1]-base, 0)
	})
}

// checkHedges checks a run with one request stalled: it finished in a
// fraction of the stall, the stalled request was hedged and the hedge
// won, and every hedge cost exactly one extra request (besides at most
// one for each of resent parts, see TestHedgedPartUpload). On a quiet machine
// that is one hedge and one extra request; on a loaded one (the race
// detector, other test binaries) a request that is merely slow may be
// hedged too, which is allowed, if noted.
func checkHedges(t *testing.T, took time.Duration, hedged, won, extra, resent int64) {
	t.Helper()
	if took > stallFor/5 {
		t.Errorf("took %v: the stalled request was not rescued by a hedge", took)
	}
	if hedged < 1 || won < 1 {
		t.Errorf("hedged %d, won %d; want the stalled request hedged and the hedge winning", hedged, won)
	}
	if extra < hedged || extra > hedged+resent {
		t.Errorf("%d extra requests for %d hedges and %d resent parts: want exactly one per hedge, and at most one per resent part", extra, hedged, resent)
	}
	if hedged > 1 {
		t.Logf("note: %d requests hedged besides the stalled one (a loaded machine)", hedged-1)
	}
}
