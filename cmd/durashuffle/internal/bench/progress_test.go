package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// recorder is a Watcher that keeps everything it is told.
type recorder struct {
	mu      sync.Mutex
	runs    []*watched
	current *watched
}

type watched struct {
	job     *Job
	samples []Sample
	result  *Result
	done    bool
}

func (r *recorder) Started(j *Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current = &watched{job: j}
	r.runs = append(r.runs, r.current)
}

func (r *recorder) Progress(j *Job, s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current == nil || r.current.job != j || r.current.done {
		panic(fmt.Sprintf("sample for %s %s outside its run", j.Kind, j.Name))
	}
	r.current.samples = append(r.current.samples, s)
}

func (r *recorder) Finished(j *Job, res *Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current.done, r.current.result = true, res
}

// TestProgressSamples runs write and read at a tiny size with a watcher:
// every child reports, what it moved never goes back, and its last sample
// agrees with its result.
func TestProgressSamples(t *testing.T) {
	ctx := context.Background()
	o := smokeOptions(t)
	rec := &recorder{}
	o.Runner.Watch = rec
	env, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	for _, s := range []string{ScenarioWrite, ScenarioRead} {
		if _, err := env.Run(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	var rounds []string
	for _, w := range rec.runs {
		j := w.job
		what := j.Kind + " " + j.Name
		if !w.done || w.result == nil {
			t.Fatalf("%s: finished %v, result %v", what, w.done, w.result)
		}
		if j.ProgressFD != 3 {
			t.Errorf("%s: progress descriptor %d, want 3", what, j.ProgressFD)
		}
		if j.Round != nil {
			rounds = append(rounds, fmt.Sprintf("%s %d/%d %d/%d", j.Round.Name, j.Round.Round, j.Round.Rounds, j.Round.Run, j.Round.Runs))
		}
		if len(w.samples) == 0 {
			t.Errorf("%s: no samples", what)
			continue
		}
		for i := 1; i < len(w.samples); i++ {
			a, b := w.samples[i-1], w.samples[i]
			// Encoded may fall back by what the last part of an
			// object fell short of a chunk (see liveMeter.encoded).
			if b.Sent < a.Sent || b.Received < a.Received || b.Seconds < a.Seconds {
				t.Errorf("%s: sample %d went back: %+v after %+v", what, i, b, a)
			}
		}
		last, stored := w.samples[len(w.samples)-1], w.result.StoredBytes
		if last.InFlight != 0 || last.Seconds <= 0 {
			t.Errorf("%s: last sample %+v: want nothing in flight, data moving for a while", what, last)
		}
		switch {
		case j.Kind == "encode-files":
			if last.Encoded != stored || last.Sent != 0 {
				t.Errorf("%s: last sample %+v, stored %d: want it all encoded, nothing sent", what, last, stored)
			}
		case j.Kind == "write" && j.NullStore:
			if last.Encoded != stored || last.Sent != 0 {
				t.Errorf("%s: last sample %+v, stored %d: want it all encoded, nothing sent", what, last, stored)
			}
		case j.Kind == "write" && (j.Name == Durashuffle || j.Name == DurashuffleAuto || j.Name == DurashuffleSpillOff || j.Name == DurashuffleEncrypted):
			if last.Encoded != stored || last.Sent != stored || last.Buffers < 0 {
				t.Errorf("%s: last sample %+v, stored %d: want it all encoded and sent", what, last, stored)
			}
		case j.Kind == "write":
			if last.Sent != stored || last.Encoded != 0 {
				t.Errorf("%s: last sample %+v, stored %d: want it all sent, no encoder", what, last, stored)
			}
			if j.Name == TransferManager && last.Total != stored {
				t.Errorf("%s: total %d, stored %d", what, last.Total, stored)
			}
		case j.Kind == "read":
			if last.Received < stored || last.Sent != 0 {
				t.Errorf("%s: last sample %+v, stored %d: want every stored byte received", what, last, stored)
			}
		}
	}
	want := "durashuffle 1/1 1/8,durashuffle-encrypted 1/1 2/8,durashuffle-auto 1/1 3/8,durashuffle-spill-off 1/1 4/8,durashuffle-encode-only 1/1 5/8," +
		"sequential 1/1 6/8,transfermanager 1/1 7/8,manager 1/1 8/8," +
		"durashuffle 1/1 1/5,durashuffle-encrypted 1/1 2/5,durashuffle-by-partition 1/1 3/5,transfermanager 1/1 4/5,manager 1/1 5/5"
	if got := strings.Join(rounds, ","); got != want {
		t.Errorf("rounds watched:\n%s\nwant\n%s", got, want)
	}
	// encode-files, the eight writers, the two stages to read (plain and
	// sealed), the five readers.
	if len(rec.runs) != 16 {
		t.Errorf("%d children watched, want 16", len(rec.runs))
	}

	// Without a watcher, a job says nothing of progress to its child.
	b, err := json.Marshal(env.job("write", Durashuffle, "q", o.Config, o.Data))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "progress") || strings.Contains(string(b), "Round") {
		t.Errorf("job without a watcher: %s", b)
	}
}
