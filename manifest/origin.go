package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Origin names the level a second level of a stage (a combined level,
// package combine) was made from: that level's index key and, as
// SHA-256 digests of fixed size whatever the stage's width, its
// workers' IDs and their attempts. A seal of the first level run again
// after the stage manifest became the combined level's compares the
// workers it was asked for with these, so an engine that retries its
// seal gets the stage back instead of ErrSealConflict.
type Origin struct {
	// Index is the first level's index key, relative to the stage prefix.
	Index string `json:"index"`
	// Workers is the first level's worker count.
	Workers int `json:"workers"`
	// IDs is the hex SHA-256 of the workers' IDs in the stage manifest's
	// order, each followed by a newline.
	IDs string `json:"ids_sha256"`
	// Attempts is the hex SHA-256 of each worker's ID, a space and its
	// attempt, and a newline, in the same order.
	Attempts string `json:"attempts_sha256"`
	// Tasks, in a combined level, is the hex SHA-256 of the task
	// manifests it was built from as the seal's LIST of them found them
	// (package combine): each one's key, size and time. Every seal of
	// the level checks the plan's task manifests against it before it
	// publishes the level, so that all of them decide alike. Empty in a
	// level written before it was recorded (its seals then check only
	// that each task manifest is there).
	Tasks string `json:"tasks_sha256,omitempty"`
}

// OriginOf describes a sealed stage as the origin of a second level.
func OriginOf(s *Stage) *Origin {
	o := &Origin{Workers: len(s.Workers), IDs: digestIDs(workerIDs(s.Workers)), Attempts: digestAttempts(s.Workers)}
	if s.Index != nil {
		o.Index = s.Index.Key
	}
	return o
}

// sameIDs says whether ids, in the stage manifest's order, are the
// origin's workers.
func (o *Origin) sameIDs(ids []string) bool {
	return len(ids) == o.Workers && digestIDs(ids) == o.IDs
}

// sameAttempts says whether ws, in the stage manifest's order, are the
// origin's workers with the same attempts.
func (o *Origin) sameAttempts(ws []Worker) bool {
	return len(ws) == o.Workers && digestAttempts(ws) == o.Attempts
}

func (o *Origin) String() string {
	return fmt.Sprintf("%d workers (index %s)", o.Workers, o.Index)
}

func workerIDs(ws []Worker) []string {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.Worker
	}
	return ids
}

func digestIDs(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func digestAttempts(ws []Worker) string {
	h := sha256.New()
	for _, w := range ws {
		h.Write([]byte(w.Worker))
		h.Write([]byte{' '})
		h.Write([]byte(w.Attempt))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}
