package store_test

import (
	"testing"

	"github.com/durashuffle/durashuffle/store"
)

// streamer is a store that streams parts.
type streamer struct{ *store.Mem }

func (streamer) StreamsParts() bool { return true }

// wrapper adds nothing to streamed parts: As looks through it.
type wrapper struct{ store.Store }

func (w wrapper) Unwrap() store.Store { return w.Store }

// opaque wraps without Unwrap: As stops at it.
type opaque struct{ store.Store }

func TestAs(t *testing.T) {
	base := streamer{new(store.Mem)}
	for _, tc := range []struct {
		name string
		st   store.Store
		want bool
	}{
		{"the store itself", base, true},
		{"through two wrappers", wrapper{wrapper{base}}, true},
		{"a store that does not stream", wrapper{new(store.Mem)}, false},
		{"a wrapper without Unwrap", wrapper{opaque{base}}, false},
	} {
		ps, ok := store.As[store.PartStreamer](tc.st)
		if ok != tc.want || ok && ps != store.PartStreamer(base) {
			t.Errorf("%s: As = %v, %v", tc.name, ps, ok)
		}
		if got := store.StreamsParts(tc.st); got != tc.want {
			t.Errorf("%s: StreamsParts = %v", tc.name, got)
		}
	}
	// A narrower interface than Store is walked too.
	var w store.Writer = wrapper{base}
	if !store.StreamsParts(w) {
		t.Error("StreamsParts of a Writer")
	}
}
