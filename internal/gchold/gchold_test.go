package gchold

import (
	"strings"
	"testing"
	"time"
)

// A hold round-trips and is told from a level's manifest by its first
// bytes; a hold that does not decode is still a hold, of no known time.
func TestParse(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h, b := New([]string{"00000000000000aa", "00000000000000bb"}, at)
	if len(h.ID) != 16 || h.Kind != Kind {
		t.Fatalf("new hold %+v", h)
	}
	got, ok := Parse(b)
	if !ok || got.ID != h.ID || !got.HeldAt.Equal(at) || strings.Join(got.Plans, ",") != "00000000000000aa,00000000000000bb" {
		t.Fatalf("parse of %s: %+v, %v", b, got, ok)
	}
	if !isHold(b[:len(prefix)]) || isHold(b[:len(prefix)-1]) {
		t.Fatalf("isHold of the first %d bytes of %s", len(prefix), b)
	}
	if !strings.Contains(got.String(), "since 2026-01-02T03:04:05Z") {
		t.Fatalf("String: %s", got)
	}
	for _, level := range []string{`{"format_version":"3.0","kind":"stage"}`, `{"kind":"stage"}`, ``, `{"kind":"gc-holds"}`} {
		if _, ok := Parse([]byte(level)); ok {
			t.Errorf("%q parsed as a hold", level)
		}
	}
	many := make([]string, 4000)
	for i := range many {
		many[i] = "0123456789abcdef"
	}
	h, b = New(many, at)
	if len(b) > ReadBytes || len(h.Plans) != MaxNamed || h.PlanCount != len(many) || !strings.Contains(h.String(), " and 3968 more") {
		t.Fatalf("a hold of %d plans: %d bytes (at most %d), %d named, %d counted: %s", len(many), len(b), ReadBytes, len(h.Plans), h.PlanCount, h)
	}
	if _, b = New(nil, at); !strings.Contains(mustParse(t, b).String(), "deleting no plan") {
		t.Fatalf("a hold of no plan: %s", mustParse(t, b))
	}
	bad, ok := Parse([]byte(`{"kind":"gc-hold","held_at":"yesterday"}`))
	if !ok || !bad.HeldAt.IsZero() {
		t.Fatalf("a hold that does not decode: %+v, %v", bad, ok)
	}
}

func mustParse(t *testing.T, b []byte) Hold {
	t.Helper()
	h, ok := Parse(b)
	if !ok {
		t.Fatalf("%s is not a hold", b)
	}
	return h
}
