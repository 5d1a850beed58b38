package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/durashuffle/durashuffle"
)

// httpHandler serves the sidecar's plain HTTP endpoints:
//
//	/metrics  Prometheus exposition of the sidecar's private registry
//	/healthz  200 while the process serves HTTP at all (liveness)
//	/readyz   200 while the bucket is reachable, the commit guard has not
//	          found that the store ignores If-None-Match and the sidecar is
//	          not shutting down; 503 with the reason otherwise (readiness).
//	          Either way a line gives the commit guard's state and store,
//	          and another what a failed probe or commit_guard off means.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := s.checkReady(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
		} else {
			fmt.Fprintln(w, "ready")
		}
		g := s.c.CommitGuard()
		fmt.Fprintf(w, "commit guard: %s (%s)\n", g.State, g.Endpoint)
		switch g.State {
		case durashuffle.GuardError:
			fmt.Fprintf(w, "the last probe failed, the next commit probes again: %v\n", g.Err)
		case durashuffle.GuardOff:
			fmt.Fprintln(w, "commit_guard is off: commits are not checked; on a store that ignores If-None-Match: * two attempts of a worker can both commit")
		}
	})
	return mux
}

// checkReady returns nil when the sidecar should receive traffic: the latest
// bucket probe succeeded, recently, the commit guard has not found that
// the store ignores If-None-Match: *, and Shutdown has not started.
func (s *Server) checkReady() error {
	if s.drain.Err() != nil {
		return errShutdown
	}
	return s.ready.err()
}

// readiness probes the bucket in the background: one LIST of a prefix
// that holds no keys ('~' is not allowed in IDs) per interval. It succeeds
// exactly when the bucket exists and the credentials may list it, and
// costs one cheap request whatever the bucket holds. Once the bucket
// answers, it also runs the client's commit guard once, so /readyz shows
// the guard's verdict before the first commit: a store that does not
// enforce If-None-Match makes the sidecar unready; a probe that failed
// otherwise does not (commits probe again).
type readiness struct {
	interval time.Duration
	cancel   context.CancelFunc
	done     chan struct{}

	mu     sync.Mutex
	lastOK time.Time
	last   error // result of the latest probe
}

func (r *readiness) start(s *Server, interval time.Duration) {
	r.interval = interval
	r.last = fmt.Errorf("bucket %q not probed yet", s.cfg.Store.Bucket)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	prefix := s.c.Layout().ReadyProbePrefix()
	go func() {
		defer close(r.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		refused := false // the guard's refusal was logged
		for {
			pctx, pcancel := context.WithTimeout(ctx, min(interval, 10*time.Second))
			_, _, err := s.c.Store().List(pctx, prefix, "/")
			pcancel()
			var gerr error
			if err == nil {
				// One probe, at the start: a probe that fails for a
				// passing reason is retried by the next commit, not here,
				// so a sidecar whose credentials cannot put (reads only)
				// costs no request per interval.
				if s.c.CommitGuard().State == durashuffle.GuardUnprobed {
					gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
					s.c.CheckCommitGuard(gctx)
					gcancel()
				}
				if g := s.c.CommitGuard(); g.State == durashuffle.GuardNotEnforced {
					gerr = g.Err
				}
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(gerr, durashuffle.ErrCommitGuard) && !refused {
				refused = true
				s.log.Error("every commit will be refused: the store does not enforce If-None-Match: * (commit_guard)",
					"endpoint", s.c.CommitGuard().Endpoint, "probes", s.c.CommitGuard().Probes, "err", gerr)
			}
			r.mu.Lock()
			prev := r.last
			switch {
			case err != nil:
				r.last = fmt.Errorf("bucket %q unreachable: %w", s.cfg.Store.Bucket, err)
			case gerr != nil:
				r.last = gerr
			default:
				r.last, r.lastOK = nil, time.Now()
			}
			now := r.last
			r.mu.Unlock()
			switch {
			case now != nil && prev == nil:
				s.log.Warn("not ready", "err", now)
			case now == nil && prev != nil:
				s.log.Info("ready: bucket reachable", "bucket", s.cfg.Store.Bucket)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (r *readiness) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil {
		return r.last
	}
	if age := time.Since(r.lastOK); age > 3*r.interval {
		return fmt.Errorf("bucket probe has not answered for %v", age.Round(time.Second))
	}
	return nil
}

func (r *readiness) stop() {
	r.cancel()
	<-r.done
}
