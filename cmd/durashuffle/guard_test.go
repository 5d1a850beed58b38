package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestCommitGuardExitsOne puts a store that does not enforce
// If-None-Match: * in front of the CLI: a proxy to MinIO that answers a
// conditional put MinIO refused (412) with 200, as a store that ignores
// the header would. write and demo exit 1 with an error that says so and
// names the endpoint, before uploading data, and commit nothing;
// --commit-guard off is the way past it.
func TestCommitGuardExitsOne(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[1])
	u, err := url.Parse(tg.ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	var swallowed, parts atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = tg.ep.Transport(t) // MinIO speaks HTTPS with the test CA
	rp.ModifyResponse = func(r *http.Response) error {
		if r.Request.Method == http.MethodPut && r.Request.URL.Query().Has("partNumber") {
			parts.Add(1)
		}
		if r.Request.Method == http.MethodPut && r.StatusCode == http.StatusPreconditionFailed {
			swallowed.Add(1)
			r.StatusCode, r.Status = http.StatusOK, "200 OK"
			r.Body = io.NopCloser(strings.NewReader(""))
			r.ContentLength = 0
			r.Header.Del("Content-Type")
			r.Header.Set("Content-Length", "0")
		}
		return nil
	}
	srv := httptest.NewServer(rp) // Host stays the proxy's, which requests are signed for
	t.Cleanup(srv.Close)
	flags := []string{"--endpoint", srv.URL, "--bucket", tg.ep.Bucket, "--path-style", "--region", "us-east-1"}
	in := arrowStream(t, testBatches(t, 0, 20000, 2000))

	for _, args := range [][]string{
		{"write", "-q", "guard", "-w", "0", "--partitions", "2", "--partition-by", "id", "--chunk-size", "5MiB"},
		{"demo", "-q", "guard", "--rows", "20000", "--workers", "2", "--partitions", "2"},
	} {
		var stdin []byte
		if args[0] == "write" {
			stdin = in
		}
		r := cli(t, tg.env, stdin, append(args, flags...)...)
		if r.code != 1 {
			t.Fatalf("%s on a store that ignores If-None-Match: exit %d, want 1\n%s", args[0], r.code, r.stderr)
		}
		for _, want := range []string{"does not enforce If-None-Match: *", srv.URL, "commit_guard: off"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr does not say %q:\n%s", args[0], want, r.stderr)
			}
		}
	}
	if swallowed.Load() == 0 {
		t.Fatal("the proxy turned no 412 into a 200: the test proves nothing")
	}
	if n := parts.Load(); n != 0 {
		t.Errorf("%d parts uploaded before the guard refused the commit", n)
	}
	raw, _ := tg.ep.NewStore(t)
	ctx := context.Background()
	l := manifest.Layout{Prefix: "durashuffle"}
	for _, w := range []string{"0", "1"} {
		if _, err := manifest.LoadWorker(ctx, raw, l, "guard", 0, w); !store.IsNotFound(err) {
			t.Fatalf("worker %s manifest after a refused commit: %v, want none", w, err)
		}
	}
	if objs, _, err := raw.List(ctx, "", ""); err != nil || len(objs) != 0 {
		t.Fatalf("objects left: %v %v", objs, err)
	}

	// The operator vouches for the store: the guard is off, and the write
	// commits through the same proxy.
	r := cli(t, tg.env, in, append([]string{"write", "-q", "guard", "-w", "0", "--partitions", "2", "--partition-by", "id",
		"--commit-guard", "off"}, flags...)...).must(t)
	if _, err := manifest.LoadWorker(ctx, raw, l, "guard", 0, "0"); err != nil {
		t.Fatalf("with --commit-guard off: %v\n%s", err, r.stderr)
	}
}
