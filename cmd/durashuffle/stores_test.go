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

// TestCommandsOnAzure runs every command a user runs on a stage (the
// demo creating its container, writes, seal, reads in both orders,
// inspect, ls, combine's plan, task and run, a read of the combined
// stage, gc, delete-query) with store azure on Azurite, selected by the
// environment alone as a user would. Each must end as it ends on S3 (the
// embedded server): the same exit and the same output less times, sizes
// and request counts. Afterwards no uncommitted blocks are left and
// delete-query has left the container empty.
func TestCommandsOnAzure(t *testing.T) {
	s3 := testenv.Embedded(t)
	want := runScenario(t, s3, faultproxy.Spec{}, map[string]string{})
	if len(want) != len(scenario(t, "")) {
		t.Fatalf("on S3, the scenario stopped after %d steps: %s", len(want), want[len(want)-1].stderr)
	}

	az := testenv.Azurite(t)
	container := fmt.Sprintf("cmds-%d", containers.Add(1))
	env := map[string]string{
		"DURASHUFFLE_STORE":            "azure",
		"DURASHUFFLE_AZURE_ACCOUNT":    az.Account,
		"DURASHUFFLE_ENDPOINT":         az.URL,
		"DURASHUFFLE_BUCKET":           container,
		"DURASHUFFLE_RETRY_BASE_DELAY": "5ms", "DURASHUFFLE_MEMORY_LIMIT": "off",
		envAzureKey: az.Key,
	}
	st, err := azstore.New(context.Background(), azstore.Options{AccountName: az.Account, AccountKey: az.Key, Endpoint: az.URL, Container: container})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := runOn(t, env, container+"-d")
	steps := scenario(t, "")
	for i, r := range got {
		if r.code != 0 {
			t.Fatalf("%s on Azure: exit %d\n%s", steps[i].name, r.code, r.stderr)
		}
		if r.outcome != want[i].outcome {
			t.Errorf("%s on Azure:\n%s\non S3:\n%s", steps[i].name, r.outcome, want[i].outcome)
		}
	}
	if len(got) != len(steps) {
		t.Fatalf("on Azure the scenario stopped after %d of %d steps", len(got), len(steps))
	}
	assertEmpty(t, st, "container "+container)
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
