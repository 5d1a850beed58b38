package uploader

import (
	"errors"
	"fmt"
)

// state is where the upload of an object stands. It changes only through
// Upload.toLocked, which refuses any change the transitions table does
// not list. The path of an object of several parts is open, multipart
// (its upload asked for), sealed (its last chunk handed over),
// completing, completed; an object of one small chunk goes from open to
// single to completed. Any state that takes or sends parts may fail, and
// every state but aborted may be aborted.
type state uint8

const (
	// stateOpen takes chunks; no multipart upload is asked for yet, so
	// part 1 may still turn out to be the whole object.
	stateOpen state = iota
	// stateMultipart takes chunks; the multipart upload is asked for
	// (an early create, or a part on its way), so the object is never one put.
	stateMultipart
	// stateSingle: part 1 was the last chunk of an object that asked for
	// no multipart upload, so it is one PutObject.
	stateSingle
	// stateSealed: the last chunk of a multipart object was handed over
	// and its tail re-cut (see planTail); it takes no more chunks.
	stateSealed
	// stateCompleting: Finish found every part stored and is completing
	// the multipart upload.
	stateCompleting
	// stateCompleted: the object is stored whole.
	stateCompleted
	// stateFailed: a part, the create or a Keeper failed (Upload.err);
	// it takes no more chunks and spends no more requests, and Finish or
	// Abort aborts it.
	stateFailed
	// stateAborted: Abort ran; nothing of the upload is left, or the
	// failure to abort it was reported.
	stateAborted
	numStates
)

var stateNames = [numStates]string{"open", "multipart", "single", "sealed", "completing", "completed", "failed", "aborted"}

func (s state) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// takesChunks reports whether chunks may still be handed over.
func (s state) takesChunks() bool { return s == stateOpen || s == stateMultipart }

// ended reports whether the upload is over: the pool no longer counts it
// open.
func (s state) ended() bool { return s == stateCompleted || s == stateAborted }

// transitions lists, for each state, the states it may change to.
var transitions = [numStates][]state{
	stateOpen:       {stateMultipart, stateSingle, stateSealed, stateFailed, stateAborted},
	stateMultipart:  {stateSealed, stateCompleting, stateFailed, stateAborted},
	stateSingle:     {stateCompleted, stateFailed, stateAborted},
	stateSealed:     {stateCompleting, stateFailed, stateAborted},
	stateCompleting: {stateCompleted, stateAborted},
	stateCompleted:  {stateAborted},
	stateFailed:     {stateAborted},
	stateAborted:    nil,
}

// errTransition is wrapped by the error of a change of state that the
// transitions table does not list: a misuse of the Upload (a chunk handed
// over after the last, Finish after Abort) or a bug.
var errTransition = errors.New("illegal upload state transition")

// canMove reports whether the transitions table lets from change to to.
func canMove(from, to state) bool {
	if from >= numStates {
		return false
	}
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// toLocked changes o's state to next (o.mu held), or returns an error
// naming both states and changes nothing. Entering completed or aborted
// from a state that had not ended counts the upload closed in its pool,
// once.
func (o *Upload) toLocked(next state) error {
	from := o.state
	if !canMove(from, next) {
		return fmt.Errorf("upload of %s: %w: %s to %s", o.key, errTransition, from, next)
	}
	o.state = next
	if next.ended() && !from.ended() {
		if o.fromDisk {
			o.pool.fromDisk.Add(-1)
		}
		o.pool.open.Add(-1)
		o.pool.idle()
	}
	return nil
}
