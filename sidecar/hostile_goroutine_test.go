package sidecar_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// panickingGets is a store whose next ranged GET of a data object, once
// armed, returns a body whose Read panics: a bug in a goroutine the
// reader starts for the DoGet, not in the handler.
type panickingGets struct {
	store.Store
	armed atomic.Bool
}

func (p *panickingGets) Unwrap() store.Store { return p.Store }

func (p *panickingGets) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	rc, err := p.Store.GetRange(ctx, key, off, length)
	if err == nil && strings.Contains(key, "/data-") && p.armed.CompareAndSwap(true, false) {
		rc.Close()
		return panicBody{}, nil
	}
	return rc, err
}

type panicBody struct{}

func (panicBody) Read([]byte) (int, error) { panic("hostile test: a bug in a body's Read") }
func (panicBody) Close() error             { return nil }

// TestHostileGoroutinePanic: a panic in a goroutine the library starts
// for a DoGet (here, reading a GET's body) fails that call alone with
// Internal; it is logged with its stack and counted in
// durashuffle_sidecar_panics_total as a handler's own panic is; no slot
// stays held, and the next DoGet reads the partition whole.
func TestHostileGoroutinePanic(t *testing.T) {
	forEveryBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		pg := &panickingGets{}
		e := newEnv(t, ep, envOptions{wrap: func(st store.Store) store.Store { pg.Store = st; return pg }})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		want := putRows(t, e, "q-gp", "0", 10, 2)
		if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": "q-gp", "stage": 0, "workers": 1}, nil); err != nil {
			t.Fatal(err)
		}
		pg.armed.Store(true)
		_, _, err := doGet(ctx, e.fc, map[string]any{"query": "q-gp", "stage": 0, "partition": 0})
		wantCode(t, err, codes.Internal, "panic in", "a bug in a body's Read")
		if pg.armed.Load() {
			t.Fatal("the DoGet never read a data object: the test proves nothing")
		}
		if n := sum(scrape(t, e.httpURL), metrics.SidecarPanicsTotal, map[string]string{"method": "DoGet"}); n != 1 {
			t.Errorf("%s{method=DoGet} = %v after one contained panic, want 1", metrics.SidecarPanicsTotal, n)
		}
		if n := sum(scrape(t, e.httpURL), metrics.SidecarStreams, nil); n != 0 {
			t.Errorf("%s = %v after the DoGet failed, want 0", metrics.SidecarStreams, n)
		}
		logs := e.logs.String()
		for _, s := range []string{"panic in a goroutine of the call", "a bug in a body's Read", "goroutine "} {
			if !strings.Contains(logs, s) {
				t.Errorf("the log does not say %q:\n%s", s, logs)
			}
		}
		readsBack(t, e, "q-gp", want)
	})
}
