package reader

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// budgetStep is one call on a decodeBudget and what it must answer: ask
// (admitted or not), take, leave, or starve (raised or not), and the
// state after it.
type budgetStep struct {
	op         string // "ask", "take", "leave", "starve"
	ask        decodeAsk
	n          int64 // take: bytes
	headQueued int   // starve
	want       bool  // ask: admitted; starve: raised
	after      decodeBudget
}

func ask(bytes int64) budgetStep { return budgetStep{op: "ask", ask: decodeAsk{bytes: bytes}} }
func (s budgetStep) asHead(queued int) budgetStep {
	s.ask.head, s.ask.queued = true, queued
	return s
}
func (s budgetStep) again() budgetStep { s.ask.heldBack = true; return s }
func (s budgetStep) admitted(held int64, waiting int) budgetStep {
	s.want, s.after.held, s.after.waiting = true, held, waiting
	return s
}
func (s budgetStep) turnedAway(held int64, waiting int) budgetStep {
	s.want, s.after.held, s.after.waiting = false, held, waiting
	return s
}
func take(n int64, held int64, waiting int) budgetStep {
	return budgetStep{op: "take", n: n, after: decodeBudget{held: held, waiting: waiting}}
}
func leave(held int64, waiting int) budgetStep {
	return budgetStep{op: "leave", after: decodeBudget{held: held, waiting: waiting}}
}
func starve(headQueued int, raised bool, limit int64) budgetStep {
	return budgetStep{op: "starve", headQueued: headQueued, want: raised, after: decodeBudget{limit: limit}}
}

// TestNewDecodeBudget: a budget starts at an eighth of its ceiling, at
// least 1 byte.
func TestNewDecodeBudget(t *testing.T) {
	for _, c := range []struct{ ceiling, limit int64 }{{64, 8}, {65, 8}, {3, 1}, {0, 1}} {
		if b := newDecodeBudget(c.ceiling); b != (decodeBudget{limit: c.limit, ceiling: c.ceiling}) {
			t.Errorf("newDecodeBudget(%d) = %+v, want limit %d, nothing held or waiting", c.ceiling, b, c.limit)
		}
	}
}

// TestDecodeBudgetPolicy runs the decode budget through its cases as a
// plain value: each step's answer and the state after it.
func TestDecodeBudgetPolicy(t *testing.T) {
	for _, c := range []struct {
		name  string
		start decodeBudget
		steps []budgetStep
	}{
		{"frames within the limit, the one at the limit included", newDecodeBudget(64), []budgetStep{
			ask(3).admitted(3, 0), ask(5).admitted(8, 0), ask(1).turnedAway(8, 1),
		}},
		{"a frame past the limit waits while anything is held", newDecodeBudget(64), []budgetStep{
			ask(6).admitted(6, 0), ask(3).turnedAway(6, 1), ask(3).again().turnedAway(6, 1),
			take(6, 0, 1), ask(3).again().admitted(3, 0),
		}},
		{"an oversize frame is admitted alone", newDecodeBudget(64), []budgetStep{
			ask(100).admitted(100, 0), ask(1).turnedAway(100, 1),
			take(100, 0, 1), ask(1).again().admitted(1, 0), ask(100).turnedAway(1, 1),
		}},
		{"the head keeps two frames ready whatever the budget", newDecodeBudget(64), []budgetStep{
			ask(8).admitted(8, 0), ask(4).asHead(0).admitted(12, 0), ask(4).asHead(1).admitted(16, 0),
			ask(4).asHead(2).turnedAway(16, 1), ask(4).turnedAway(16, 2),
		}},
		{"room comes back in any order of release", newDecodeBudget(64), []budgetStep{
			ask(4).admitted(4, 0), ask(4).admitted(8, 0), ask(2).turnedAway(8, 1), ask(4).turnedAway(8, 2),
			take(4, 4, 2), // the second frame first
			ask(4).again().admitted(8, 1), ask(2).again().turnedAway(8, 1),
			take(4, 4, 1), ask(2).again().admitted(6, 0), take(2, 4, 0), take(4, 0, 0),
		}},
		{"zero limit: one frame at a time, besides the head's", decodeBudget{}, []budgetStep{
			ask(1).admitted(1, 0), ask(1).turnedAway(1, 1), ask(1).asHead(0).admitted(2, 1),
			take(1, 1, 1), take(1, 0, 1), ask(1).again().admitted(1, 0),
			starve(0, false, 0), starve(1, false, 0),
		}},
		{"zero ceiling starts at a limit of 1 and never rises", newDecodeBudget(0), []budgetStep{
			ask(1).admitted(1, 0), ask(1).turnedAway(1, 1), starve(1, false, 1),
		}},
		{"a wait for bytes does not raise the limit", newDecodeBudget(64), []budgetStep{
			starve(0, false, 8), ask(8).admitted(8, 0), starve(0, false, 8),
		}},
		{"a wait while the head decodes raises it to the ceiling", newDecodeBudget(64), []budgetStep{
			ask(4).asHead(0).admitted(4, 0), starve(1, true, 64), starve(1, false, 64),
		}},
		{"a wait while a fetch is held back raises it; the fetch is admitted", newDecodeBudget(64), []budgetStep{
			ask(8).admitted(8, 0), ask(8).turnedAway(8, 1), starve(0, true, 64), ask(8).again().admitted(16, 0),
		}},
		{"a fetch that leaves is no longer waiting", newDecodeBudget(64), []budgetStep{
			ask(8).admitted(8, 0), ask(8).turnedAway(8, 1), leave(8, 0), starve(0, false, 8),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.start
			for i, s := range c.steps {
				var got bool
				before := b
				switch s.op {
				case "ask":
					b, got = b.ask(s.ask)
				case "take":
					b = b.take(s.n)
				case "leave":
					b = b.leave()
				case "starve":
					b, got = b.starve(s.headQueued)
				}
				step := fmt.Sprintf("step %d (%s %+v) on %+v", i, s.op, s.ask, before)
				if (s.op == "ask" || s.op == "starve") && got != s.want {
					t.Fatalf("%s answered %v, want %v", step, got, s.want)
				}
				if s.op == "starve" {
					if b.limit != s.after.limit || b.held != before.held || b.waiting != before.waiting || b.ceiling != before.ceiling {
						t.Fatalf("%s: %+v, want limit %d and the rest unchanged", step, b, s.after.limit)
					}
					continue
				}
				if b.held != s.after.held || b.waiting != s.after.waiting || b.limit != before.limit || b.ceiling != before.ceiling {
					t.Fatalf("%s: %+v, want held %d, waiting %d, limits unchanged", step, b, s.after.held, s.after.waiting)
				}
			}
		})
	}
}

// TestDecodeGateWaitsForTheBudget: the gate holds a fetch the budget
// turns away until room is taken back, and lets it go, unadmitted and no
// longer counted as waiting, when the stream ends.
func TestDecodeGateWaitsForTheBudget(t *testing.T) {
	g := newDecodeGate(64) // limit 8
	a, b, c := &fetch{}, &fetch{}, &fetch{}
	if !g.admit(a, 8) {
		t.Fatal("a frame within an empty budget was not admitted")
	}
	admitted := make(chan bool, 2)
	go func() { admitted <- g.admit(b, 4) }()
	waitHeldBack(t, g, b)
	select {
	case <-admitted:
		t.Fatal("b was admitted past the budget")
	case <-time.After(20 * time.Millisecond):
	}
	g.taken(a, 8)
	if !<-admitted {
		t.Fatal("b was not admitted once a's frame was taken")
	}
	g.mu.Lock()
	st := g.b
	g.mu.Unlock()
	if st.held != 4 || st.waiting != 0 || b.queued != 1 || b.heldBack {
		t.Fatalf("after b's admission: %+v, b queued %d held back %v; want held 4, none waiting", st, b.queued, b.heldBack)
	}

	go func() { admitted <- g.admit(c, 8) }()
	waitHeldBack(t, g, c)
	ctx, cancel := context.WithCancel(context.Background())
	context.AfterFunc(ctx, g.close)
	cancel()
	if <-admitted {
		t.Fatal("c was admitted after the stream ended")
	}
	g.mu.Lock()
	st = g.b
	g.mu.Unlock()
	if st.held != 4 || st.waiting != 0 || c.queued != 0 || c.heldBack {
		t.Fatalf("after the end: %+v, c queued %d held back %v; want held 4, none waiting", st, c.queued, c.heldBack)
	}
	if g.admit(a, 1) {
		t.Fatal("a frame was admitted after the stream ended")
	}
}
