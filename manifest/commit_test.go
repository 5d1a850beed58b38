package manifest

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/durashuffle/durashuffle/store"
)

// lossyStore stores a put and then answers it with a 500, as a response
// lost on its way back; with failGets every GET fails too.
type lossyStore struct {
	*store.Mem
	failPut, failGets bool
}

func (s *lossyStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	err := s.Mem.Put(ctx, key, body, o)
	if err == nil && s.failPut {
		return &store.Error{Op: "PutObject", Key: key, Status: 500, Code: "InternalError", Retryable: true}
	}
	return err
}

func (s *lossyStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if s.failGets {
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
