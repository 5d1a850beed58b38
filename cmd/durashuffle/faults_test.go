package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// commandFaults are the matrix's columns: each operation's first request
// meets the fault (faultproxy's First), so every kind of request each
// command sends meets it once, however few the command sends.
var commandFaults = []faultproxy.Fault{faultproxy.FaultReset, faultproxy.FaultTruncate, faultproxy.FaultInternal, faultproxy.FaultSlowDown}

// matrixRate is how often the column's fault meets a request beyond the
// first of each operation: the seed decides which.
const matrixRate = 0.05

// step is one command line of the scenario and the part of its output
// that must not depend on the network.
type step struct {
	name  string
	stdin []byte
	args  []string
}

// stepResult is what one step did.
type stepResult struct {
	result
	outcome  string           // the output, less what varies from run to run
	retried  map[string]int64 // retries by operation (the retry layer's count)
	injected map[string]int64 // faults injected by operation (the proxy's count)
}

// scenario is every command a user runs on a stage, in a lifecycle
// order: the demo (creating its own bucket), two workers' writes, seal,
// reads in both orders, inspect, ls, combine (plan, one task, the rest
// and the seal), a read of the combined stage, gc and delete-query.
func scenario(t *testing.T, demoBucket string) []step {
	in := func(w int) []byte { return arrowStream(t, testBatches(t, w*1500, w*1500+1500, 500)) }
	g := []string{"-q", "fq", "--groups", "2", "--buckets", "2"}
	// The demo's objects are single puts in make test (multipart uploads
	// under faults are the data path's matrix, TestFaultMatrix); make
	// soak writes two parts per worker.
	demoRows := "20000"
	if os.Getenv(testenv.EnvSoakRuns) != "" {
		demoRows = "150000"
	}
	return []step{
		{"demo", nil, []string{"demo", "--json", "--query", "fd", "--rows", demoRows, "--workers", "2", "--partitions", "4", "--chunk-size", "5MiB", "--bucket", demoBucket}},
		{"write 0", in(0), []string{"write", "-q", "fq", "-w", "0", "--partitions", "4", "--partition-by", "id", "--json"}},
		{"write 1", in(1), []string{"write", "-q", "fq", "-w", "1", "--partitions", "4", "--partition-by", "id", "--json"}},
		{"seal", nil, []string{"seal", "-q", "fq", "--workers", "2", "--json"}},
		{"read partition order", nil, []string{"read", "-q", "fq", "--partitions", "0-3", "--format", "jsonl"}},
		{"read storage order", nil, []string{"read", "-q", "fq", "--order", "storage", "--format", "jsonl"}},
		{"inspect", nil, []string{"inspect", "-q", "fq", "--json"}},
		{"ls", nil, []string{"ls", "--json"}},
		{"combine plan", nil, append([]string{"combine", "--plan", "--json"}, g...)},
		{"combine task", nil, append([]string{"combine", "--task", "1", "--json"}, g...)},
		{"combine", nil, append([]string{"combine", "--json"}, g...)},
		{"read combined", nil, []string{"read", "-q", "fq", "--partitions", "0-3", "--format", "jsonl"}},
		{"gc", nil, []string{"gc", "--older-than", "1h", "--combined-grace", "1ns", "--json"}},
		{"delete-query", nil, []string{"delete-query", "-q", "fq", "--json"}},
	}
}

// volatile matches the JSON keys whose values differ between runs on any
// network: times, rates, request and retry counts, attempt IDs, the
// endpoint and bucket, the client's buffers.
// Object keys and sizes hold attempt IDs and times (a manifest's size
// too), how the demo's producers interleave decides its frames, and
// timing which streamed parts are sent again whole (parts_resent), so
// only counts are compared: rows, partitions, objects, parts, workers,
// tasks, what was deleted.
var volatile = regexp.MustCompile(`second|_at$|mib|request|retr|attempt|endpoint|bucket|buffered|hedge|concurrency|probe|elapsed|memory|took|^id$|key|now|cutoff|modified|bytes|size|ratio|skew|^frames$|resent`)

// stable is a command's output less what varies between runs: JSON with
// the volatile keys dropped, at any depth; anything else as it is.
func stable(out string) string {
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return out
	}
	var drop func(v any) any
	drop = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if volatile.MatchString(k) {
					delete(x, k)
				} else {
					x[k] = drop(e)
				}
			}
		case []any:
			for i, e := range x {
				x[i] = drop(e)
			}
		}
		return v
	}
	b, _ := json.Marshal(drop(v))
	return string(b)
}

// runScenario runs the scenario in this process against ep through a
// fault proxy with spec, every client's requests audited: none may go
// around the retry layer. It stops at the first step that fails.
func runScenario(t *testing.T, ep testenv.Endpoint, spec faultproxy.Spec, env map[string]string) []stepResult {
	return runScenarioFrom(t, ep, 0, spec, env)
}

// runScenarioFrom is runScenario with no faults before step from.
func runScenarioFrom(t *testing.T, ep testenv.Endpoint, from int, spec faultproxy.Spec, env map[string]string) []stepResult {
	t.Helper()
	p, err := faultproxy.StartTLS(ep.URL, spec, ep.ServerTLS(t), ep.Transport(t).TLSClientConfig)
	if err != nil {
		t.Fatal(err)
	}
	tr := ep.Transport(t)
	t.Cleanup(tr.CloseIdleConnections)
	audit := testenv.NewRetryAudit(tr)
	env = maps.Clone(env)
	for k, v := range map[string]string{"ENDPOINT": p.URL(), "PATH_STYLE": "true", "REGION": "us-east-1", "BUCKET": ep.Bucket} {
		if _, ok := env["DURASHUFFLE_"+k]; !ok {
			env["DURASHUFFLE_"+k] = v
		}
	}
	opts := []durashuffle.Option{durashuffle.WithHTTPClient(audit.Client())}
	if ep.AccessKeyID != "" {
		opts = append(opts, durashuffle.WithCredentials(credentials.NewStaticCredentialsProvider(ep.AccessKeyID, ep.SecretAccessKey, "")))
	}
	return runSteps(t, p, audit, from, spec, env, ep.Bucket+"-d", func(a *app) { a.clientOptions = opts })
}

// runSteps runs the scenario's steps in this process through the fault
// proxy p (closed at the end of the test), spec on every step from step
// from, each client's requests audited by audit, with the environment env
// (quick retries and no memory limit added); with, if set, completes the
// app of each step. It stops at the first step that fails.
func runSteps(t *testing.T, p *faultproxy.Proxy, audit *testenv.RetryAudit, from int, spec faultproxy.Spec, env map[string]string, demoBucket string, with func(*app)) []stepResult {
	t.Helper()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close fault proxy: %v", err)
		}
	})
	env = maps.Clone(env)
	for k, v := range map[string]string{"RETRY_BASE_DELAY": "5ms", "RETRY_MAX_DELAY": "50ms", "MEMORY_LIMIT": "off"} {
		if _, ok := env["DURASHUFFLE_"+k]; !ok {
			env["DURASHUFFLE_"+k] = v
		}
	}
	getenv := func(k string) string { return env[k] }
	counter := &store.Counter{}
	var out []stepResult
	for i, s := range scenario(t, demoBucket) {
		args := append(slices.Clone(s.args), "--log-level", "warn")
		audit.Reset()
		sp := spec
		if i < from {
			sp = faultproxy.Spec{}
		}
		if err := p.SetSpec(sp); err != nil { // First starts over for each command
			t.Fatal(err)
		}
		retriesBefore, faultsBefore := counter.Retries(), p.Stats()
		var so, se bytes.Buffer
		a := &app{stdin: bytes.NewReader(s.stdin), stdout: &so, stderr: &se, getenv: getenv, counter: counter}
		if with != nil {
			with(a)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		code := a.run(ctx, args)
		cancel()
		r := stepResult{result: result{stdout: so.String(), stderr: se.String(), code: code}, outcome: stable(so.String()),
			retried: map[string]int64{}, injected: map[string]int64{}}
		for k, v := range counter.Retries() {
			if d := v - retriesBefore[k]; d > 0 {
				r.retried[k.Op] += d
			}
		}
		after := p.Stats()
		for k, v := range after.Injected {
			if d := v - faultsBefore.Injected[k]; d > 0 && k.Fault != faultproxy.FaultSpike {
				r.injected[k.Op] += d
			}
		}
		audit.Check(t, s.name)
		out = append(out, r)
		if code != 0 {
			break
		}
	}
	return out
}

// openUploads fails t for every multipart upload left open in ep's bucket
// and returns the number of objects it holds.
func openUploads(t *testing.T, ep testenv.Endpoint) int {
	t.Helper()
	st, _ := ep.NewStore(t)
	ctx := context.Background()
	ups, err := st.ListUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		t.Errorf("multipart upload left open: %s (%s)", u.Key, u.UploadID)
	}
	objs, _, err := st.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

// gaveUp is how the retry layer says that a request's retries are spent:
// the operation, then the attempts.
var gaveUp = regexp.MustCompile(`[A-Z][A-Za-z0-9]+: gave up after \d+ attempts`)

// TestCommandFaults is the command-level fault matrix: every command of
// the scenario, on the embedded server and on MinIO, through a fault
// proxy whose fault (reset, cut body, 500, SlowDown) meets the first
// request of every operation, and 5% of the others by the seed. Each
// command must end as on a clean
// network: same exit, same output (less times and counts), and the
// bucket must hold the same objects and no open multipart upload; every
// request of every command must go through the retry layer.
func TestCommandFaults(t *testing.T) {
	runs := testenv.SoakRuns(t, 1)
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			clean := b.get(t)
			want := runScenario(t, clean, faultproxy.Spec{}, map[string]string{})
			wantObjects := openUploads(t, clean)
			for i, r := range want {
				if r.code != 0 {
					t.Fatalf("clean run: step %d exits %d\n%s", i, r.code, r.stderr)
				}
			}
			if len(want) != len(scenario(t, "")) {
				t.Fatalf("clean run stopped after %d steps", len(want))
			}
			table := map[string]map[faultproxy.Fault]string{}
			for _, f := range commandFaults {
				for seed := 1; seed <= runs; seed++ {
					t.Run(fmt.Sprintf("%s/seed=%d", f, seed), func(t *testing.T) {
						ep := b.get(t)
						got := runScenario(t, ep, faultproxy.Only(f, matrixRate, uint64(seed)), map[string]string{})
						var injected, retried int64
						steps := scenario(t, "")
						for i, r := range got {
							name := steps[i].name
							if r.code != 0 {
								t.Errorf("%s: exit %d under first=%s\n%s", name, r.code, f, r.stderr)
								continue
							}
							if r.outcome != want[i].outcome {
								t.Errorf("%s under first=%s:\n%s\nclean:\n%s", name, f, r.outcome, want[i].outcome)
							}
							injected += sum(r.injected)
							retried += sum(r.retried)
							if table[name] == nil {
								table[name] = map[faultproxy.Fault]string{}
							}
							table[name][f] = fmt.Sprintf("ok; %d faults (%s); %d retried (%s)", sum(r.injected), testenv.FormatCounts(r.injected), sum(r.retried), testenv.FormatCounts(r.retried))
						}
						// Not every fault costs the retry layer a retry: a
						// cut error answer still carries its status (a 412
						// is an answer), and Go's transport sends a GET
						// again by itself on a reused connection reset
						// before any answer.
						if injected == 0 || retried == 0 {
							t.Errorf("first=%s: %d faults injected, %d requests retried: the matrix proved nothing", f, injected, retried)
						}
						if n := openUploads(t, ep); n != wantObjects {
							t.Errorf("first=%s: the bucket holds %d objects, %d after the clean run", f, n, wantObjects)
						}
					})
				}
			}
			for _, s := range scenario(t, "") {
				var cells []string
				for _, f := range commandFaults {
					cells = append(cells, fmt.Sprintf("%s: %s", f, table[s.name][f]))
				}
				t.Logf("%-22s %s", s.name, strings.Join(cells, " || "))
			}
		})
	}
}

// TestCommandGivesUp: a command whose request fails on every attempt
// ends with an error that names the request and the attempts, and leaves
// no multipart upload open and nothing of what it was writing stored.
func TestCommandGivesUp(t *testing.T) {
	env := map[string]string{"DURASHUFFLE_RETRY_MAX_ATTEMPTS": "2"}
	steps := scenario(t, "")
	for _, tc := range []struct {
		step   string // the step whose requests of op all fail
		op     string
		absent string // a key (part) that must not be stored after it
	}{
		{"demo", "HeadBucket", ""},
		{"write 0", "PutObject", "worker-0/"},
		{"seal", "GetObject", "stage-0/manifest.json"},
		{"ls", "ListObjectsV2", ""},
		{"combine", "PutObject", "/task-0"}, // task 1 ran before
	} {
		t.Run(tc.step, func(t *testing.T) {
			from := slices.IndexFunc(steps, func(s step) bool { return s.name == tc.step })
			ep := backends[0].get(t)
			got := runScenarioFrom(t, ep, from, faultproxy.Spec{Internal: 1, Ops: []string{tc.op}}, env)
			last := got[len(got)-1]
			if last.code != exitFailure || len(got) != from+1 {
				t.Fatalf("stopped at step %d (exit %d), want %q (step %d) to fail\n%s", len(got)-1, last.code, tc.step, from, last.stderr)
			}
			if !gaveUp.MatchString(last.stderr) || !strings.Contains(last.stderr, "gave up after 2 attempts") || !strings.Contains(last.stderr, tc.op) {
				t.Errorf("%s: the error does not name %s and its attempts:\n%s", tc.step, tc.op, last.stderr)
			}
			openUploads(t, ep)
			if tc.absent == "" {
				return
			}
			st, _ := ep.NewStore(t)
			objs, _, err := st.List(context.Background(), "durashuffle/fq/", "")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if strings.Contains(o.Key, tc.absent) {
					t.Errorf("%s failed, yet %s is stored", tc.step, o.Key)
				}
			}
		})
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for v := range maps.Values(m) {
		n += v
	}
	return n
}
