package manifest

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/store"
)

// lossyStore stores a put and then answers it with a 500, as a response
// lost on its way back (with taken, a 412, as the retry of such a put
// is answered); only puts of keys ending in only, if set. With failGets
// every GET after such a put fails too.
type lossyStore struct {
	*store.Mem
	failPut, taken, failGets bool
	only                     string
	put                      bool // a put of only was made
}

func (s *lossyStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	err := s.Mem.Put(ctx, key, body, o)
	s.put = s.put || strings.HasSuffix(key, s.only)
	switch {
	case err != nil || !strings.HasSuffix(key, s.only):
	case s.taken:
		return &store.Error{Op: "PutObject", Key: key, Status: 412, Code: "PreconditionFailed", Err: store.ErrPreconditionFailed}
	case s.failPut:
		return &store.Error{Op: "PutObject", Key: key, Status: 500, Code: "InternalError", Retryable: true}
	}
	return err
}

func (s *lossyStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if s.failGets && s.put {
		return nil, &store.Error{Op: "GetObject", Key: key, Status: 503, Code: "SlowDown", Retryable: true}
	}
	return s.Mem.GetRange(ctx, key, off, n)
}

// TestCommitOutcomes: what Commit answers when the worker manifest's key
// is taken, or its put's answer is lost, for each kind of earlier writer.
func TestCommitOutcomes(t *testing.T) {
	ctx := context.Background()
	l := Layout{Prefix: "p"}
	worker := func(attempt, write string, crc uint32) *Worker {
		w := synthWorker("q", 0, 1, 2, 1)
		w.Attempt = attempt
		w.Objects[0].Key = DataName(w.Worker, attempt, write, 0)
		w.Objects[0].CRC32C = crc
		return w
	}
	for _, tc := range []struct {
		name            string
		earlier         *Worker // committed first; nil: none
		failPut, noGets bool
		w               *Worker
		wantErr         error
		wantEarlier     bool // Commit returns the earlier manifest
	}{
		{"first", nil, false, false, worker("a", "0000000000000001", 7), nil, false},
		{"lost answer of its own put", nil, true, false, worker("a", "0000000000000001", 7), nil, false},
		{"other attempt", worker("a", "0000000000000001", 7), false, false, worker("b", "0000000000000002", 7), ErrAlreadyCommitted, false},
		{"same attempt, other content", worker("a", "0000000000000001", 7), false, false, worker("a", "0000000000000002", 8), ErrAlreadyCommitted, false},
		{"same attempt, same content", worker("a", "0000000000000001", 7), false, false, worker("a", "0000000000000002", 7), nil, true},
		{"taken, unreadable", worker("a", "0000000000000001", 7), false, true, worker("a", "0000000000000002", 7), ErrCommitUnknown, false},
		{"lost answer, unreadable", nil, true, true, worker("a", "0000000000000001", 7), ErrCommitUnknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &lossyStore{Mem: &store.Mem{}}
			if tc.earlier != nil {
				if _, err := Commit(ctx, st, l, tc.earlier); err != nil {
					t.Fatal(err)
				}
			}
			st.failPut, st.failGets = tc.failPut, tc.noGets
			got, err := Commit(ctx, st, l, tc.w)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Commit: %v, want %v", err, tc.wantErr)
			}
			switch {
			case err != nil:
				if got != nil {
					t.Fatalf("Commit failed and returned %+v", got)
				}
			case tc.wantEarlier && (got == tc.w || got.Objects[0].Key != tc.earlier.Objects[0].Key):
				t.Fatalf("Commit returned %+v, want the earlier manifest", got.Objects)
			case !tc.wantEarlier && got != tc.w:
				t.Fatalf("Commit returned %+v, want its own manifest", got.Objects)
			}
			st.failGets = false
			stored, err := LoadWorker(ctx, st, l, "q", 0, "1")
			if err != nil {
				t.Fatal(err)
			}
			want := tc.w
			if tc.earlier != nil {
				want = tc.earlier
			}
			if stored.Objects[0].Key != want.Objects[0].Key {
				t.Fatalf("stored manifest names %s, want %s", stored.Objects[0].Key, want.Objects[0].Key)
			}
		})
	}
}

// TestSealOutcomes: what Seal answers, and which index objects it
// leaves, when its stage manifest's put is answered with an error after
// it landed (a lost answer, or the 412 its retry meets), when another
// seal committed first, and when the outcome cannot be read back. The
// index the standing manifest names is always there, and no other.
func TestSealOutcomes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name                  string
		failPut, taken, other bool
		noGets                bool
		wantErr               error
		wantIndexes           int
	}{
		{"lost answer", true, false, false, false, nil, 1},
		{"retry refused: its own put landed", false, true, false, false, nil, 1},
		{"another seal committed first", false, false, true, false, nil, 1},
		{"lost answer, unreadable", true, false, false, true, ErrCommitUnknown, 1},
		{"refused, unreadable", false, true, false, true, ErrCommitUnknown, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &lossyStore{Mem: &store.Mem{}, only: "/manifest.json"}
			ids := synthStage(t, st, testLayout, "q", 3, 4, 2)
			var first *Stage
			if tc.other {
				var err error
				if first, err = Seal(ctx, st, testLayout, "q", 0, ids); err != nil {
					t.Fatal(err)
				}
			}
			st.failPut, st.taken, st.failGets, st.put = tc.failPut, tc.taken, tc.noGets, false
			got, err := Seal(ctx, st, testLayout, "q", 0, ids)
			st.failPut, st.taken, st.failGets = false, false, false
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Seal: %v, want %v", err, tc.wantErr)
			}
			stored, lerr := LoadStageManifest(ctx, st, testLayout, "q", 0)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if err == nil && got.Index.Key != stored.Index.Key {
				t.Fatalf("Seal returned index %s, the stage manifest names %s", got.Index.Key, stored.Index.Key)
			}
			if first != nil && stored.Index.Key != first.Index.Key {
				t.Fatalf("the stage manifest names index %s, the first seal wrote %s", stored.Index.Key, first.Index.Key)
			}
			objs, _, _ := st.List(ctx, testLayout.StagePrefix("q", 0), "/")
			var indexes []string
			for _, o := range objs {
				if strings.Contains(o.Key, "/index-") {
					indexes = append(indexes, o.Key)
				}
			}
			if len(indexes) != tc.wantIndexes || !strings.HasSuffix(indexes[0], "/"+stored.Index.Key) {
				t.Fatalf("index objects %v, want the one the manifest names (%s)", indexes, stored.Index.Key)
			}
			if _, err := stored.Frames(ctx, st, testLayout, nil); err != nil {
				t.Fatalf("read the sealed stage's frames: %v", err)
			}
		})
	}
}
