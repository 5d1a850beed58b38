package uploader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestTransitions: toLocked makes exactly the changes of state listed
// here, each from its own state, and refuses every other pair with an
// error wrapping errTransition that names the object and both states,
// leaving the state as it was. Entering completed or aborted from a
// state that had not ended counts the upload closed in its pool, once.
func TestTransitions(t *testing.T) {
	legal := map[string]bool{}
	for _, tr := range []string{
		"open>multipart", "open>single", "open>sealed", "open>failed", "open>aborted",
		"multipart>sealed", "multipart>completing", "multipart>failed", "multipart>aborted",
		"single>completed", "single>failed", "single>aborted",
		"sealed>completing", "sealed>failed", "sealed>aborted",
		"completing>completed", "completing>aborted",
		"completed>aborted",
		"failed>aborted",
	} {
		legal[tr] = true
	}
	seen := 0
	for from := range numStates {
		for to := range numStates {
			name := from.String() + ">" + to.String()
			t.Run(name, func(t *testing.T) {
				p := newTestPool(newScripted())
				defer p.Close()
				o := p.newUpload(context.Background(), "data-7", nil)
				o.state = from
				if from.ended() {
					p.open.Add(-1) // as if it had entered from by a transition
				}
				open := p.open.Load()
				err := o.toLocked(to)
				if !legal[name] {
					want := fmt.Sprintf("upload of data-7: illegal upload state transition: %s to %s", from, to)
					if !errors.Is(err, errTransition) || err.Error() != want {
						t.Fatalf("toLocked: %v, want %q", err, want)
					}
					if o.state != from || p.open.Load() != open {
						t.Fatalf("a refused change left the upload %s (open uploads %d), want %s (%d)", o.state, p.open.Load(), from, open)
					}
					return
				}
				seen++
				if err != nil {
					t.Fatalf("toLocked: %v, want the change made", err)
				}
				if o.state != to {
					t.Fatalf("state %s after the change, want %s", o.state, to)
				}
				wantOpen := open
				if to == stateCompleted || to == stateAborted {
					if from != stateCompleted {
						wantOpen--
					}
				}
				if p.open.Load() != wantOpen {
					t.Fatalf("%d uploads counted open after %s, want %d", p.open.Load(), name, wantOpen)
				}
			})
		}
	}
	if seen != len(legal) {
		t.Fatalf("%d legal changes made, want the %d listed", seen, len(legal))
	}
	if s := state(200).String(); s != "state(200)" {
		t.Fatalf("an unknown state prints as %q", s)
	}
	if canMove(state(200), stateAborted) {
		t.Fatal("an unknown state may change")
	}
}

// TestMisuseIsRefused: what the state machine refuses through the API
// (a chunk after the last, Finish twice or after Abort) fails with an
// error naming the object and its state, spends no request, and leaves
// what was stored as it was.
func TestMisuseIsRefused(t *testing.T) {
	ctx := context.Background()
	t.Run("a chunk after the last", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(ctx, "k", nil)
		write(t, p, o, 3)
		buf, _ := p.acquire(ctx)
		err := o.submit(4, append(buf, 1), true)
		if err == nil || err.Error() != "chunk 4 of k: the upload takes no chunks when sealed" {
			t.Fatalf("submit after the last chunk: %v", err)
		}
		if _, err := o.begin(5, nil); err == nil || !strings.Contains(err.Error(), "takes no chunks when sealed") {
			t.Fatalf("begin after the last chunk: %v", err)
		}
		res, err := o.Finish(ctx)
		if err != nil || res.Parts != 3 || res.Size != 2*testChunk+testChunk/2 {
			t.Fatalf("Finish = %+v, %v: want the 3 chunks handed over before", res, err)
		}
		if n := p.Stats().Buffered; n != 0 {
			t.Fatalf("%d buffers held: the refused chunk's was not given back", n)
		}
	})
	t.Run("a second chunk of a single put", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(ctx, "k", nil)
		write(t, p, o, 1)
		buf, _ := p.acquire(ctx)
		if err := o.submit(2, append(buf, 1), true); err == nil || !strings.Contains(err.Error(), "chunk 2 of k: the upload takes no chunks when single") {
			t.Fatalf("submit after the only chunk: %v", err)
		}
		if _, err := o.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		if st.count("Put k") != 1 || st.count("UploadPart") != 0 {
			t.Fatalf("calls %v: want the one put alone", st.calls)
		}
	})
	t.Run("Finish twice", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(ctx, "k", nil)
		write(t, p, o, 2)
		if _, err := o.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := o.Finish(ctx)
		if !errors.Is(err, errTransition) || !strings.Contains(err.Error(), "upload of k: illegal upload state transition: completed to completing") {
			t.Fatalf("second Finish: %v", err)
		}
		if st.count("Complete") != 1 {
			t.Fatalf("calls %v: want one Complete", st.calls)
		}
		// Complete: nothing to abort; the caller deletes the object.
		if err := o.Abort(); err != nil || st.count("Abort") != 0 || st.objects["k"] != testChunk+testChunk/2 {
			t.Fatalf("Abort after Finish: %v, calls %v, objects %v", err, st.calls, st.objects)
		}
	})
	t.Run("Finish after Abort", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(ctx, "k", nil)
		write(t, p, o, 2)
		if err := o.Abort(); err != nil {
			t.Fatal(err)
		}
		_, err := o.Finish(ctx)
		if !errors.Is(err, errTransition) || !strings.Contains(err.Error(), "aborted to completing") {
			t.Fatalf("Finish after Abort: %v", err)
		}
		if st.count("Complete") != 0 || st.count("Abort u1") != 1 || len(st.uploads) != 0 {
			t.Fatalf("calls %v, uploads left %v: want one abort and no Complete", st.calls, st.uploads)
		}
	})
	t.Run("Finish with nothing handed over", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(ctx, "k", nil)
		if _, err := o.Finish(ctx); err == nil || err.Error() != "object k: finished with no chunks" {
			t.Fatalf("Finish of an empty object: %v", err)
		}
		if len(st.calls) != 0 || p.open.Load() != 0 {
			t.Fatalf("calls %v, %d uploads open: want no request and the upload ended", st.calls, p.open.Load())
		}
	})
}
