package durashuffle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// GuardState is what the commit guard knows of the store's
// If-None-Match: * (see Client.CheckCommitGuard); the metric
// durashuffle_commit_guard labels its states with these strings.
type GuardState string

// The commit guard's states.
const (
	GuardUnprobed    GuardState = "unprobed"     // no commit yet: the probe runs before the first
	GuardEnforced    GuardState = "enforced"     // the store refused the second conditional put: commits go ahead
	GuardNotEnforced GuardState = "not_enforced" // the store took it: every commit fails
	GuardError       GuardState = "error"        // the last probe failed; the next commit probes again
	GuardOff         GuardState = "off"          // commit_guard off: no probe, commits go ahead
)

// GuardStatus is the commit guard's state for the client's store.
type GuardStatus struct {
	State    GuardState
	Endpoint string // the store, as errors name it
	Err      error  // GuardNotEnforced: the refusal; GuardError: the probe's failure
	Probes   int64  // probes the client has sent since Open (0 with commit_guard off)
}

// probeTimeout bounds one probe (three small requests with their retries)
// when the caller's context has no earlier deadline: on a healthy store a
// probe takes milliseconds, and a store that does not answer must not
// hold a write up for long (the commit probes again).
const probeTimeout = 20 * time.Second

// probeDeleteTimeout bounds the probe key's delete: a key left behind
// is a few bytes outside the layout.
const probeDeleteTimeout = 5 * time.Second

// commitGuard probes once per Client whether the store enforces
// If-None-Match: *. A definite answer is kept for the client's life; a
// probe that fails (the store unreachable, the caller gone) is not, so the
// next commit probes again. Safe for concurrent use: concurrent commits
// wait for one probe rather than each sending their own.
type commitGuard struct {
	mu     sync.Mutex
	status GuardStatus
	probes int64 // probes sent (GuardStatus.Probes)
}

// CheckCommitGuard returns nil when commits may go ahead: commit_guard is
// off, or a probe has shown that the store refuses a second PutObject
// with If-None-Match: * (412 or 409). It probes on the first call (two
// puts and a delete of a key under the prefix that no layout key can
// collide with) and keeps a definite answer; on a store that took the
// second put, it and every later call return an error wrapping
// ErrCommitGuard that names the endpoint. A probe that fails otherwise
// returns that failure and is retried on the next call. Writer.Commit and
// Seal call it before they write anything visible; callers may call it
// earlier to fail before uploading. Safe for concurrent use.
func (c *Client) CheckCommitGuard(ctx context.Context) error {
	if c.cfg.Store.CommitGuard == commitGuardOff {
		return nil
	}
	g := &c.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.status.State {
	case GuardEnforced:
		return nil
	case GuardNotEnforced:
		return g.status.Err
	}
	g.probes++
	state, err := c.probeGuard(ctx)
	g.status = GuardStatus{State: state, Endpoint: c.storeName(), Err: err}
	return err
}

// CommitGuard reports the guard's state without probing.
func (c *Client) CommitGuard() GuardStatus {
	if c.cfg.Store.CommitGuard == commitGuardOff {
		return GuardStatus{State: GuardOff, Endpoint: c.storeName()}
	}
	c.guard.mu.Lock()
	defer c.guard.mu.Unlock()
	s := c.guard.status
	if s.State == "" {
		s = GuardStatus{State: GuardUnprobed, Endpoint: c.storeName()}
	}
	s.Probes = c.guard.probes
	return s
}

// storeName names the store in errors: its endpoint and bucket.
func (c *Client) storeName() string {
	ep := c.cfg.Store.Endpoint
	if ep == "" {
		region := c.cfg.Store.Region
		if region == "" {
			region = "the AWS chain's region"
		}
		ep = "AWS S3 (" + region + ")"
	}
	return fmt.Sprintf("%s, bucket %s", ep, c.cfg.Store.Bucket)
}

// probeGuard puts a fresh key with If-None-Match: *, puts it again with
// the same condition, which must fail, and deletes it.
func (c *Client) probeGuard(ctx context.Context) (GuardState, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var b [manifest.GuardProbeIDLength / 2]byte
	_, _ = rand.Read(b[:])
	// '~' is in no ID, so no key of the layout can be the probe's.
	key := c.layout.GuardProbeKey(hex.EncodeToString(b[:]))
	unanswered := false
	defer func() {
		// A probe key left behind (the delete failed, or was not tried
		// on a store that did not answer) is a few bytes outside the
		// layout; gc removes it, and nothing reads it.
		if unanswered {
			return
		}
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), probeDeleteTimeout)
		defer dcancel()
		_ = c.st.Delete(dctx, key)
	}()
	opts := store.PutOptions{IfNoneMatch: true, ContentType: "text/plain"}
	// A 412 on the first put of a fresh key means an earlier try of this
	// very put succeeded and its answer was lost: the condition held.
	if err := c.st.Put(ctx, key, []byte("1"), opts); err != nil && !errors.Is(err, store.ErrPreconditionFailed) {
		var ne net.Error
		unanswered = errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
		return GuardError, fmt.Errorf("commit guard: probe %s (If-None-Match: *) at %s: %w", key, c.storeName(), err)
	}
	err := c.st.Put(ctx, key, []byte("2"), opts)
	switch {
	case errors.Is(err, store.ErrPreconditionFailed):
		return GuardEnforced, nil
	case err != nil:
		return GuardError, fmt.Errorf("commit guard: second probe put of %s at %s: %w", key, c.storeName(), err)
	}
	return GuardNotEnforced, fmt.Errorf("commit refused by the commit guard: %w (store %s): it accepted a second PutObject of %s with If-None-Match: * "+
		"where it must answer 412 or 409, so two attempts of a worker could both commit; nothing was committed. "+
		"Use a store that enforces the condition, or set commit_guard: off only for a store you vouch for",
		ErrCommitGuard, c.storeName(), key)
}
