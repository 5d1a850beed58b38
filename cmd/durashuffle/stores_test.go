package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// assertEmpty fails t for every object and open upload left in st.
func assertEmpty(t *testing.T, st store.Store, what string) {
	t.Helper()
	ctx := context.Background()
	ups, err := st.ListUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		t.Errorf("%s: upload left open: %s (%s)", what, u.Key, u.UploadID)
	}
	objs, _, err := st.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	if len(keys) > 0 {
		t.Errorf("%s holds %d objects after delete-query: %s", what, len(keys), strings.Join(keys, ", "))
	}
}
