package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/azstore"
	"github.com/durashuffle/durashuffle/store/gcsstore"
)

// containers numbers the containers the tests make on Azurite.
var containers atomic.Int64

// runOn runs the scenario's commands in this process with the
// environment env alone (the store's keys and secrets), and returns what
// each step did; it stops at the first step that fails.
func runOn(t *testing.T, env map[string]string, demoBucket string) []stepResult {
	t.Helper()
	getenv := func(k string) string { return env[k] }
	var out []stepResult
	for _, s := range scenario(t, demoBucket) {
		var so, se bytes.Buffer
		a := &app{stdin: bytes.NewReader(s.stdin), stdout: &so, stderr: &se, getenv: getenv}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		code := a.run(ctx, append(s.args, "--log-level", "warn"))
		cancel()
		out = append(out, stepResult{result: result{stdout: so.String(), stderr: se.String(), code: code}, outcome: stable(so.String())})
		if code != 0 {
			break
		}
	}
	return out
}

// onS3 is the scenario's outcome on S3 (the embedded server), which
// every other store must match.
func onS3(t *testing.T) []stepResult {
	t.Helper()
	want := runScenario(t, testenv.Embedded(t), faultproxy.Spec{}, map[string]string{})
	if len(want) != len(scenario(t, "")) {
		t.Fatalf("on S3, the scenario stopped after %d steps: %s", len(want), want[len(want)-1].stderr)
	}
	return want
}

// sameAsS3 runs the scenario with env on the store it selects and fails
// t for every step that does not end as it ended on S3 (want).
func sameAsS3(t *testing.T, want []stepResult, env map[string]string, demoBucket, store string) {
	t.Helper()
	env["DURASHUFFLE_RETRY_BASE_DELAY"], env["DURASHUFFLE_MEMORY_LIMIT"] = "5ms", "off"
	got := runOn(t, env, demoBucket)
	steps := scenario(t, "")
	for i, r := range got {
		if r.code != 0 {
			t.Fatalf("%s on %s: exit %d\n%s", steps[i].name, store, r.code, r.stderr)
		}
		if r.outcome != want[i].outcome {
			t.Errorf("%s on %s:\n%s\non S3:\n%s", steps[i].name, store, r.outcome, want[i].outcome)
		}
	}
	if len(got) != len(steps) {
		t.Fatalf("on %s the scenario stopped after %d of %d steps", store, len(got), len(steps))
	}
}

// TestCommandsOnEveryStore runs every command a user runs on a stage
// (the demo creating its bucket, writes, seal, reads in both orders,
// inspect, ls, combine's plan, task and run, a read of the combined
// stage, gc, delete-query) on Azure Blob Storage (Azurite) and Google
// Cloud Storage (fake-gcs-server), each selected by the environment
// alone as a user would. Each command must end as it ends on S3 (the
// embedded server): the same exit and the same output less times, sizes
// and request counts. Afterwards no upload is left open and
// delete-query has left the container or bucket empty.
func TestCommandsOnEveryStore(t *testing.T) {
	want := onS3(t)
	ctx := context.Background()
	t.Run("azure", func(t *testing.T) {
		az := testenv.Azurite(t)
		container := fmt.Sprintf("cmds-%d", containers.Add(1))
		st, err := azstore.New(ctx, azstore.Options{AccountName: az.Account, AccountKey: az.Key, Endpoint: az.URL, Container: container})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureBucket(ctx); err != nil {
			t.Fatal(err)
		}
		sameAsS3(t, want, map[string]string{
			"DURASHUFFLE_STORE":         "azure",
			"DURASHUFFLE_AZURE_ACCOUNT": az.Account,
			"DURASHUFFLE_ENDPOINT":      az.URL,
			"DURASHUFFLE_BUCKET":        container,
			envAzureKey:                 az.Key,
		}, container+"-d", "Azure")
		assertEmpty(t, st, "container "+container)
	})
	t.Run("gcs", func(t *testing.T) {
		url := testenv.FakeGCS(t)
		bucket := fmt.Sprintf("cmds-%d", containers.Add(1))
		st, err := gcsstore.New(ctx, gcsstore.Options{Endpoint: url, Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureBucket(ctx); err != nil {
			t.Fatal(err)
		}
		sameAsS3(t, want, map[string]string{
			"DURASHUFFLE_STORE":    "gcs",
			"DURASHUFFLE_ENDPOINT": url,
			"DURASHUFFLE_BUCKET":   bucket,
		}, bucket+"-d", "GCS")
		assertEmpty(t, st, "bucket "+bucket)
	})
}

// assertEmpty fails t for every upload left open in st and for any
// object left.
func assertEmpty(t *testing.T, st store.Store, what string) {
	t.Helper()
	if n := objectsLeft(t, st); n != 0 {
		t.Errorf("%s holds %d objects after delete-query", what, n)
	}
}

// cloudTarget is a cloud store's emulator that the scenario reaches
// through a fault proxy.
type cloudTarget struct {
	name string
	// upstream is the emulator's URL; account, the path under it of
	// the account (Azure's) or empty.
	upstream, account string
	// env selects the store and its credentials (not the endpoint or the
	// bucket).
	env map[string]string
	// open returns the store on bucket, for making and checking it.
	open func(t *testing.T, bucket string) store.Store
}

// cloudTargets are the emulators the tests start, one per cloud store.
func cloudTargets(t *testing.T) []cloudTarget {
	az := testenv.Azurite(t)
	gcs := testenv.FakeGCS(t)
	return []cloudTarget{
		{name: "azure", upstream: strings.TrimSuffix(az.URL, "/"+az.Account), account: "/" + az.Account,
			env: map[string]string{"DURASHUFFLE_STORE": "azure", "DURASHUFFLE_AZURE_ACCOUNT": az.Account, envAzureKey: az.Key},
			open: func(t *testing.T, bucket string) store.Store {
				st, err := azstore.New(context.Background(), azstore.Options{AccountName: az.Account, AccountKey: az.Key, Endpoint: az.URL, Container: bucket})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}},
		{name: "gcs", upstream: gcs,
			env: map[string]string{"DURASHUFFLE_STORE": "gcs"},
			open: func(t *testing.T, bucket string) store.Store {
				st, err := gcsstore.New(context.Background(), gcsstore.Options{Endpoint: gcs, Bucket: bucket})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}},
	}
}

// serveTarget is how `durashuffle serve` reaches bucket of tg through
// url (the emulator's or a proxy's): the store, its account and
// endpoint as flags, its secrets in the environment.
func (tg cloudTarget) serveTarget(url, bucket string) target {
	sc := target{flags: []string{"--store", tg.name, "--endpoint", url + tg.account, "--bucket", bucket,
		"--retry-base-delay", "5ms", "--retry-max-delay", "50ms"}}
	for k, v := range tg.env {
		switch k {
		case "DURASHUFFLE_AZURE_ACCOUNT":
			sc.flags = append(sc.flags, "--azure-account", v)
		case "DURASHUFFLE_STORE":
		default:
			sc.env = append(sc.env, k+"="+v)
		}
	}
	return sc
}

// runCloud runs the scenario on a new bucket of tg through a fault proxy
// with spec, every request audited (none may go around the retry
// layer); it returns what each step did and the bucket's store.
func runCloud(t *testing.T, tg cloudTarget, spec faultproxy.Spec) ([]stepResult, store.Store) {
	t.Helper()
	bucket := fmt.Sprintf("faults-%d", containers.Add(1))
	st := tg.open(t, bucket)
	if err := st.(store.BucketMaker).EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Start(tg.upstream, spec)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	audit := testenv.NewRetryAudit(tr)
	env := maps.Clone(tg.env)
	env["DURASHUFFLE_ENDPOINT"], env["DURASHUFFLE_BUCKET"] = p.URL()+tg.account, bucket
	got := runSteps(t, p, audit, 0, spec, env, bucket+"-d", func(a *app) { a.transport = audit })
	return got, st
}

// TestCommandFaultsOnEveryStore is the command-level fault matrix on the
// cloud stores' emulators: every command of the scenario through a fault
// proxy whose fault (reset, cut body, the service's server error or its
// "slow down": Azure's 500 OperationTimedOut and 503 ServerBusy, GCS's 503
// backendError and 429 rateLimitExceeded) meets the first request of
// each of the service's operations (Put Block, Put Block List,
// objects.compose, ...), and 5% of the others by the seed. Each
// command must end as on a clean network (same exit, same output less
// times and counts), the bucket must hold the same number of objects and
// no open upload, and every request must go through the retry layer.
func TestCommandFaultsOnEveryStore(t *testing.T) {
	runs := testenv.SoakRuns(t, 1)
	for _, tg := range cloudTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			want, st := runCloud(t, tg, faultproxy.Spec{})
			steps := scenario(t, "")
			if len(want) != len(steps) {
				t.Fatalf("clean run stopped after %d steps: %s", len(want), want[len(want)-1].stderr)
			}
			wantObjects := objectsLeft(t, st)
			for _, f := range commandFaults {
				for seed := 1; seed <= runs; seed++ {
					t.Run(fmt.Sprintf("%s/seed=%d", f, seed), func(t *testing.T) {
						got, st := runCloud(t, tg, faultproxy.Only(f, matrixRate, uint64(seed)))
						var injected, retried int64
						for i, r := range got {
							if r.code != 0 {
								t.Errorf("%s: exit %d under first=%s\n%s", steps[i].name, r.code, f, r.stderr)
								continue
							}
							if r.outcome != want[i].outcome {
								t.Errorf("%s under first=%s:\n%s\nclean:\n%s", steps[i].name, f, r.outcome, want[i].outcome)
							}
							injected += sum(r.injected)
							retried += sum(r.retried)
						}
						if injected == 0 || retried == 0 {
							t.Errorf("first=%s: %d faults injected, %d requests retried: the matrix proved nothing", f, injected, retried)
						}
						if n := objectsLeft(t, st); n != wantObjects {
							t.Errorf("first=%s: the bucket holds %d objects, %d after the clean run", f, n, wantObjects)
						}
						t.Logf("first=%s: %d faults (%s), %d retried", f, injected, testenv.FormatCounts(sumOps(got, true)), retried)
					})
				}
			}
		})
	}
}

// objectsLeft fails t for every upload left open in st and returns the
// number of objects it holds.
func objectsLeft(t *testing.T, st store.Store) int {
	t.Helper()
	ctx := context.Background()
	ups, err := st.ListUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		t.Errorf("upload left open: %s (%s)", u.Key, u.UploadID)
	}
	objs, _, err := st.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

// sumOps adds the steps' faults injected (or requests retried) by
// operation.
func sumOps(steps []stepResult, injected bool) map[string]int64 {
	out := map[string]int64{}
	for _, r := range steps {
		m := r.retried
		if injected {
			m = r.injected
		}
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// TestSidecarOnEveryStore runs the sidecar's lifecycle on each cloud
// store's emulator, cleanly and through a fault proxy whose fault (reset,
// cut body, the service's server error or "slow down", in its own words)
// meets the first request of each of its operations and 5% of the
// others: `durashuffle serve --store azure|gcs` takes two
// workers' DoPuts, seals (the seal action), describes and lists the
// stage (GetFlightInfo, ListFlights), serves every partition (DoGet),
// combines the stage (the combine action) and serves it again, then gc
// and delete-query leave the bucket empty. Every row comes back exactly
// once whatever the network did; the memory tier is off, so every read
// is a ranged GET of the store.
func TestSidecarOnEveryStore(t *testing.T) {
	for _, tg := range cloudTargets(t) {
		for _, f := range append([]faultproxy.Fault{""}, commandFaults...) {
			name := tg.name + "/clean"
			if f != "" {
				name = tg.name + "/first=" + string(f)
			}
			t.Run(name, func(t *testing.T) {
				bucket := fmt.Sprintf("sidecar-%d", containers.Add(1))
				st := tg.open(t, bucket)
				ctx := context.Background()
				if err := st.(store.BucketMaker).EnsureBucket(ctx); err != nil {
					t.Fatal(err)
				}
				spec := faultproxy.Spec{}
				if f != "" {
					spec = faultproxy.Only(f, matrixRate, 1)
				}
				p, err := faultproxy.Start(tg.upstream, spec)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				s := startFast(t, tg.serveTarget(p.URL(), bucket), "0", "-", "")
				const q, partitions = "sq", 8
				want := writeStage(t, ctx, s, q, partitions, 20000)
				info, err := s.fc.Describe(ctx, q, 0)
				if err != nil || info.Rows != 40000 {
					t.Fatalf("GetFlightInfo: %+v, %v; want 40000 rows", info, err)
				}
				if stages, err := s.fc.List(ctx, q); err != nil || len(stages) != 1 {
					t.Fatalf("ListFlights: %d stages, %v; want 1", len(stages), err)
				}
				got, err := s.getAll(ctx, q, partitions, nil)
				if err != nil {
					t.Fatalf("DoGet: %v\n%s", err, s.stderr.String())
				}
				sameRows(t, got, want)
				if _, err := s.fc.Combine(ctx, flightclient.CombineRequest{Query: q, Stage: 0, Groups: 1, Buckets: 2}); err != nil {
					t.Fatalf("combine: %v\n%s", err, s.stderr.String())
				}
				if got, err = s.getAll(ctx, q, partitions, nil); err != nil {
					t.Fatalf("DoGet of the combined stage: %v\n%s", err, s.stderr.String())
				}
				sameRows(t, got, want)
				if _, err := s.fc.GC(ctx, time.Hour, time.Nanosecond); err != nil {
					t.Fatalf("gc: %v", err)
				}
				if _, err := s.fc.DeleteQuery(ctx, q); err != nil {
					t.Fatalf("delete-query: %v", err)
				}
				if f != "" && p.Stats().ByFault()[f] == 0 {
					t.Errorf("first=%s: no fault injected: the test proved nothing", f)
				}
				t.Logf("faults injected: %s", testenv.FormatCounts(p.Stats().ByOp()))
				assertEmpty(t, st, "bucket "+bucket)
			})
		}
	}
}

// TestFastPathOnEveryStore runs the sidecars' fast path on Azure Blob
// Storage (Azurite) and Google Cloud Storage (fake-gcs-server): sidecar
// A holds the workers it committed in its memory store and serves them
// with no data read from the store; sidecar B reads them from A over
// Flight; after A releases the stage, B reads it from the store. Every
// read returns the rows written, and delete-query leaves the bucket
// empty.
func TestFastPathOnEveryStore(t *testing.T) {
	for _, tg := range cloudTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			bucket := fmt.Sprintf("fast-%d", containers.Add(1))
			st := tg.open(t, bucket)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := st.(store.BucketMaker).EnsureBucket(ctx); err != nil {
				t.Fatal(err)
			}
			sc := tg.serveTarget(tg.upstream, bucket)
			a := startFast(t, sc, "256MiB", "", "")
			b := startFast(t, sc, "256MiB", "", "")
			const q, partitions = "fq", 8
			want := writeStage(t, ctx, a, q, partitions, 20000)
			if got := a.heldWorkers(ctx, q); len(got) != 2 {
				t.Fatalf("a holds workers %v, want 0 and 1", got)
			}
			served := func(s *fastSidecar, source string) float64 {
				return s.metric("durashuffle_served_bytes_total", "source="+source)
			}

			got, err := a.getAll(ctx, q, partitions, nil)
			if err != nil {
				t.Fatalf("DoGet from a: %v\n%s", err, a.stderr.String())
			}
			sameRows(t, got, want)
			mem := served(a, "memory")
			if mem == 0 || served(a, "s3") != 0 {
				t.Fatalf("a served %v bytes from memory and %v from the store; want all from memory", mem, served(a, "s3"))
			}

			if got, err = b.getAll(ctx, q, partitions, nil); err != nil {
				t.Fatalf("DoGet from b: %v\n%s", err, b.stderr.String())
			}
			sameRows(t, got, want)
			if peer := served(b, "peer"); peer != mem || served(b, "s3") != 0 {
				t.Fatalf("b served %v bytes from its peer (a served %v from memory) and %v from the store", peer, mem, served(b, "s3"))
			}

			if rel, err := a.fc.Release(ctx, q, 0); err != nil || rel.Workers != 2 {
				t.Fatalf("release: %+v, %v", rel, err)
			}
			if got, err = b.getAll(ctx, q, partitions, nil); err != nil {
				t.Fatalf("DoGet from b after release: %v\n%s", err, b.stderr.String())
			}
			sameRows(t, got, want)
			if served(b, "s3") == 0 {
				t.Fatalf("after a released the stage, b served nothing from the store")
			}
			if _, err := a.fc.DeleteQuery(ctx, q); err != nil {
				t.Fatalf("delete-query: %v", err)
			}
			assertEmpty(t, st, "bucket "+bucket)
		})
	}
}
