package reader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/durashuffle/durashuffle/internal/hedge"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/store"
)

// Sources of stored bytes, as Observer.Served reports them.
const (
	SourceMemory = "memory" // this process's memory store
	SourcePeer   = "peer"   // another sidecar's memory store, over Flight
	SourceS3     = "s3"     // the object store
)

// Reasons a read fell back from a Source to the object store, as
// Observer.Fallback reports them.
const (
	FallbackMiss        = "miss"        // the source does not hold the bytes (evicted, released, restarted)
	FallbackChecksum    = "checksum"    // bytes from the source failed the manifest's CRC32C
	FallbackTimeout     = "timeout"     // the source was late and the hedged GET answered first
	FallbackRefused     = "refused"     // the peer refused the call (token, certificate)
	FallbackUnavailable = "unavailable" // the peer could not be reached or went away mid-call
	FallbackError       = "error"       // any other failure (short answer, bad request)
)

// FallbackReasons lists every reason, for metrics that start at 0.
var FallbackReasons = []string{FallbackMiss, FallbackChecksum, FallbackTimeout, FallbackRefused, FallbackUnavailable, FallbackError}

// ServedSources lists every source, for metrics that start at 0.
var ServedSources = []string{SourceMemory, SourcePeer, SourceS3}

// ErrNoSource is what a Source returns for a range it has no way to
// serve (no memory store holds it and no peer is named): the read goes
// to the object store and no fallback is counted.
var ErrNoSource = errors.New("no fast source for these frames")

// SourceError is a Source's failure with the reason it is counted under
// (one of the Fallback constants).
type SourceError struct {
	Reason string
	Err    error
}

func (e *SourceError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// SourceRange is a byte range of one committed worker's data object.
type SourceRange struct {
	Query   string
	Stage   int
	Worker  string
	Attempt string
	// Peer is the worker's advertised sidecar address from its manifest
	// (empty: none).
	Peer   string
	Object int    // index into the worker's objects
	Key    string // the object's full key, for messages
	Offset int64
	Length int64
}

// Source serves committed frames' stored bytes from somewhere faster
// than the object store: a memory store, a peer sidecar. It is only an
// accelerator: the reader checks every frame it returns against the
// manifest's CRC32C and reads from the store whatever it cannot or does
// not serve correctly. Implementations must be safe for concurrent use.
type Source interface {
	// Fetch returns exactly r.Length bytes of the range, and which source
	// served them (SourceMemory or SourcePeer). The reader never modifies
	// the bytes. It fails with ErrNoSource when it has nothing to ask, or
	// with a *SourceError saying why it fell short; ctx cancelled means
	// the reader stopped waiting.
	Fetch(ctx context.Context, r SourceRange) ([]byte, string, error)
}

// Observer receives the reader's byte and fallback counts. Safe for
// concurrent use, cheap; nil ignores them. A durashuffle.Client passes
// its own observer (durashuffle.WithObserver) as Options.Observer of the
// stages it opens when that observer has these methods too.
type Observer interface {
	// Served counts stored bytes delivered from source.
	Served(source string, bytes int64)
	// Fallback counts one range (or frame, for checksum) read from the
	// store because the fast source fell short.
	Fallback(reason string)
}

func (s *Stage) served(source string, n int64) {
	if s.o.Observer != nil && n > 0 {
		s.o.Observer.Served(source, n)
	}
}

func (s *Stage) fallback(reason string) {
	if s.o.Observer != nil {
		s.o.Observer.Fallback(reason)
	}
}

// fallbackReason classifies a Source's failure.
func fallbackReason(err error) string {
	var se *SourceError
	if errors.As(err, &se) && se.Reason != "" {
		return se.Reason
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return FallbackTimeout
	}
	return FallbackError
}

// sourceDelay is how long a Source may take before the same range is
// also requested from the store: the Source hedger's delay (hedge_factor
// times the recent p90 of Source fetches), or before it has samples,
// SourceDelay.
func (s *Stage) sourceDelay() time.Duration {
	if h := s.o.SourceHedge; h != nil {
		if d := h.h.Delay(); d > 0 {
			return d
		}
	}
	return s.o.SourceDelay
}

// fetchFast reads a span from the Source, hedged by a GET from the store
// when the Source is late (a hedge.Race of the two). ok is false when the
// Source has nothing to offer or failed before the GET was sent: the
// caller reads the store as usual. Otherwise the span's bytes are
// returned whole and checked: every frame passed its CRC32C, or was read
// again from the store (its own failure is then the span's error, as for
// a GET).
func fetchFast(ctx context.Context, s *Stage, sp span) (rawSpan, bool) {
	if s.o.Source == nil || len(sp.Frames) == 0 {
		return rawSpan{}, false
	}
	f0 := sp.Frames[0]
	w := &s.m.Workers[f0.Worker]
	rng := SourceRange{Query: s.m.Query, Stage: s.m.Stage, Worker: w.Worker, Attempt: w.Attempt, Peer: w.Peer,
		Object: f0.Frame.Object, Key: sp.Key, Offset: sp.Offset, Length: sp.Length}
	o := hedge.Race[rawSpan]{
		First: func(ctx context.Context) (rawSpan, error) {
			b, from, err := s.o.Source.Fetch(ctx, rng)
			if err == nil && int64(len(b)) != sp.Length {
				err = &SourceError{Reason: FallbackError, Err: fmt.Errorf("%s answered %d bytes of %s [%d, %d), want %d", from, len(b), sp.Key, sp.Offset, sp.Offset+sp.Length, sp.Length)}
			}
			return rawSpan{buf: b, got: int64(len(b)), from: from}, err
		},
		Second: func(ctx context.Context) (rawSpan, error) {
			r := getRange(ctx, s, sp, false)
			return r, r.err
		},
		FirstOp:  "the Source's Fetch",
		SecondOp: "the store's ranged GET",
		Delay:    s.sourceDelay(),
		Release:  rawSpan.release,
	}.Run(ctx)
	fastErr, s3 := o.First.Err, o.Second
	switch {
	case o.Panic != nil:
		// A bug, in the Source or the store: the span fails, as a GET
		// that panicked does without a Source, rather than being read
		// again by a fallback that hides it.
		return rawSpan{err: o.Panic}, true
	case o.Won == hedge.First:
		if s.o.SourceHedge != nil {
			s.o.SourceHedge.h.Observe(o.Elapsed)
		}
		return verifyFast(ctx, s, sp, o.First.Value.buf, o.First.Value.from), true
	case o.Won == hedge.Second:
		s.fallback(FallbackTimeout)
		s.served(SourceS3, s3.Value.got)
		return s3.Value, true
	case !s3.Ran:
		// The Source failed before the GET was sent.
		if errors.Is(fastErr, ErrNoSource) {
			return rawSpan{}, false
		}
		if ctx.Err() != nil {
			return rawSpan{err: context.Cause(ctx)}, true // the reader stopped, not the source
		}
		s.fallback(fallbackReason(fastErr))
		return rawSpan{}, false
	}
	// Both failed: the GET's bytes and error are the span's.
	if !errors.Is(fastErr, ErrNoSource) && ctx.Err() == nil {
		s.fallback(fallbackReason(fastErr))
	}
	s.served(SourceS3, s3.Value.got)
	return s3.Value, true
}

// verifyFast checks each frame of a span served by a Source against its
// CRC32C and reads the frames that fail from the store, into a copy of
// the span (the Source's bytes are never modified), checking those too.
// The span it returns is marked checked: decoding does not check again.
func verifyFast(ctx context.Context, s *Stage, sp span, b []byte, from string) rawSpan {
	good := int64(len(b))
	var own bool
	for _, f := range sp.Frames {
		lo, hi := f.At, f.At+f.Frame.Length
		if store.CRC32C(b[lo:hi]) == f.Frame.CRC32C {
			continue
		}
		s.fallback(FallbackChecksum)
		good -= f.Frame.Length
		if !own {
			b, own = append([]byte(nil), b...), true
		}
		n, err := readInto(ctx, s, sp.Key, sp.Offset+lo, b[lo:hi])
		s.served(SourceS3, n)
		if err != nil {
			return rawSpan{buf: b, got: lo + n, err: err}
		}
		if got := store.CRC32C(b[lo:hi]); got != f.Frame.CRC32C {
			// The store's own copy is bad too: the frame fails as it would
			// without a fast source.
			return rawSpan{buf: b, got: lo, err: frameErr(s, f, fmt.Errorf("%w: stored bytes have CRC32C %08x, manifest says %08x", ErrChecksum, got, f.Frame.CRC32C))}
		}
	}
	s.served(from, good)
	return rawSpan{buf: b, got: int64(len(b)), checked: true}
}

// readInto fills p with the store's bytes at off of key. A panic in the
// store's GET or its body is its error.
func readInto(ctx context.Context, s *Stage, key string, off int64, p []byte) (n int64, err error) {
	defer safe.Recover(&err, "the store's ranged GET")
	body, err := s.st.GetRange(ctx, key, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer body.Close()
	got, err := io.ReadFull(body, p)
	return int64(got), err
}

// getRange reads a span into a buffer from spanBufs: from its run's GET
// when viaRun and it has one (the caller holds its turn), else in a
// ranged GET of its own.
func getRange(ctx context.Context, s *Stage, sp span, viaRun bool) rawSpan {
	pb := &spanBuf{b: spanBufs.get(sp.Length)}
	var (
		n   int64
		err error
	)
	if viaRun && sp.run != nil {
		n, err = readRun(ctx, s, sp, pb.b)
	} else {
		n, err = readInto(ctx, s, sp.Key, sp.Offset, pb.b)
	}
	return rawSpan{buf: pb.b, got: n, err: err, pooled: pb}
}

// readRun fills p with sp's bytes from its run's GET. A panic in the
// store's GET or its body is its error (the run's next span then opens
// a GET of its own).
func readRun(ctx context.Context, s *Stage, sp span, p []byte) (n int64, err error) {
	defer safe.Recover(&err, "the store's ranged GET")
	body, done, err := sp.run.section(ctx, s.st, sp)
	if err != nil {
		return 0, err
	}
	got, err := io.ReadFull(body, p)
	done(int64(got), err)
	return int64(got), err
}

// sendFast decodes and sends the frames of a span fetchFast returned, as
// fetchSpan would: the whole frames before a failure are delivered.
func (r *Records) sendFast(f *fetch, s *Stage, sp span, rw rawSpan) error {
	for _, sf := range sp.Frames {
		if end := sf.At + sf.Frame.Length; end > rw.got {
			return shortRead(s, sp, sf, rw.got, rw.err)
		}
		if ok, err := r.decode(f, sf, rw.buf[sf.At:sf.At+sf.Frame.Length], rw.checked); !ok {
			return err
		}
	}
	return nil
}
