// Package gchold is the mark gc puts at a stage's combined.json while
// it deletes the keys of combine plans left over on a stage that is not
// combined. combined.json is the commit point of a combined level: a
// seal takes it with If-None-Match, and so does gc, before it deletes
// anything of a plan. While gc holds it no level can be committed, and
// while a level is there gc deletes nothing of the plans left over.
//
// A hold is small JSON that starts with {"kind":"gc-hold", which no
// level's manifest does: Parse tells the two apart from a prefix of the
// object. A hold names a random ID, so that its gc can tell it from
// another gc's, the plans it deletes, and when it was taken, so that a
// hold left by a gc that was killed is taken over by a later gc once it
// is older than that gc's --older-than.
package gchold

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Kind is the kind field of a hold.
const Kind = "gc-hold"

// prefix starts every encoded hold (Kind is the first field).
var prefix = []byte(`{"kind":"` + Kind + `"`)

// Hold is gc's mark at combined.json.
type Hold struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	// Plans names at most MaxNamed of the plans gc deletes, and
	// PlanCount counts them all, so that a hold stays under ReadBytes.
	Plans     []string  `json:"plans"`
	PlanCount int       `json:"plan_count"`
	HeldAt    time.Time `json:"held_at"`
}

// MaxNamed is the most plans a hold names.
const MaxNamed = 32

// ReadBytes is how many bytes of combined.json tell a hold from a
// level's manifest and hold a whole hold: a ranged read of this many
// bytes reads a hold whole, and a level's first bytes.
const ReadBytes = 4096

// New makes a hold of the given plans, taken at now, and its bytes.
func New(plans []string, now time.Time) (Hold, []byte) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	h := Hold{Kind: Kind, ID: hex.EncodeToString(b[:]), Plans: plans[:min(len(plans), MaxNamed)], PlanCount: len(plans), HeldAt: now.UTC()}
	enc, err := json.Marshal(h)
	if err != nil {
		panic(fmt.Sprintf("encode a gc hold: %v", err)) // a struct of strings and a time always encodes
	}
	return h, enc
}

// isHold says whether b, the first bytes of combined.json (at least
// len(prefix), or all of it), are a hold's.
func isHold(b []byte) bool { return bytes.HasPrefix(b, prefix) }

// Parse decodes a hold; ok is false when b is not one (a level's
// manifest). A hold that does not decode is still a hold, of no known
// time: the zero HeldAt, which any gc takes as old.
func Parse(b []byte) (h Hold, ok bool) {
	if !isHold(b) {
		return Hold{}, false
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return Hold{Kind: Kind}, true
	}
	return h, true
}

// String names the hold for messages: when it was taken and the plans
// its gc deletes.
func (h Hold) String() string {
	plans := "no plan"
	if len(h.Plans) > 0 {
		plans = "the keys of plan " + strings.Join(h.Plans, ", ")
		if more := h.PlanCount - len(h.Plans); more > 0 {
			plans += fmt.Sprintf(" and %d more", more)
		}
	}
	return fmt.Sprintf("held by gc %s since %s, deleting %s", h.ID, h.HeldAt.Format(time.RFC3339), plans)
}
