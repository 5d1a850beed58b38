package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/store"
)

// TestKilledWriterOnCloudStores kills a real `durashuffle write` process
// with SIGKILL while its parts are in flight on Azure Blob Storage
// (Azurite) and Google Cloud Storage (fake-gcs-server), as
// TestKilledWriterIsCleanedUp does on MinIO. Nothing is committed: no
// manifest, and the stage is not found by a reader. What the writer left
// (Azure's uncommitted blocks on a blob name, GCS's part objects under
// .durashuffle-parts/, the objects it had finished) is gc's: `gc
// --older-than D` removes all of it once older than D, and leaves alone
// an upload younger than D opened afterwards.
func TestKilledWriterOnCloudStores(t *testing.T) {
	for _, ct := range cloudTargets(t) {
		t.Run(ct.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			bucket := fmt.Sprintf("kill-%d", containers.Add(1))
			st := ct.open(t, bucket)
			if err := st.(store.BucketMaker).EnsureBucket(ctx); err != nil {
				t.Fatal(err)
			}
			tg := target{flags: []string{"--endpoint", ct.upstream + ct.account, "--bucket", bucket}}
			for k, v := range ct.env {
				tg.env = append(tg.env, k+"="+v)
			}
			const q = "crash"
			prefix := "durashuffle/" + q + "/"
			args := []string{"write", "-q", q, "-s", "0", "-w", "0", "--partitions", "1", "-i", "-", "--attempt", "killed",
				"--chunk-size", "5MiB", "--max-object-size", "5MiB", "--compression", "none", "--hedge-factor", "0", "--spill", "off"}
			killMidUpload(t, tg, st, prefix, args)

			// Nothing committed, nothing readable, the garbage left for gc.
			objs, _, err := st.List(ctx, prefix, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if strings.Contains(o.Key, "manifest") || !strings.Contains(o.Key, "/worker-0/attempt-killed/data-") {
					t.Fatalf("a killed writer left %s", o.Key)
				}
			}
			ups, err := st.ListUploads(ctx, prefix)
			if err != nil || len(ups) == 0 || len(objs) < 2 {
				t.Fatalf("after the kill: uploads %v (%v), %d objects; want an open upload and stored objects", ups, err, len(objs))
			}
			if r := tg.run(t, nil, "read", "-q", q, "-s", "0", "--format", "jsonl"); r.code != 1 || !strings.Contains(r.stderr, "stage not found") {
				t.Fatalf("read of the killed stage: exit %d\n%s", r.code, r.stderr)
			}

			// Older than the kill by 2 s, an upload a live writer opened.
			time.Sleep(2 * time.Second)
			young := strings.Replace(ups[0].Key, "/worker-0/attempt-killed/", "/worker-1/attempt-young/", 1)
			id, err := st.CreateMultipart(ctx, young)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.UploadPart(ctx, young, id, 1, store.BytesBody(bytes.Repeat([]byte("y"), 1<<20))); err != nil {
				t.Fatal(err)
			}
			var rep gc.Report
			tg.run(t, nil, "gc", "--older-than", "1500ms", "--json").must(t).decode(t, &rep)
			if rep.Totals.UploadsAborted != len(ups) || rep.Totals.OrphanObjects != len(objs) {
				t.Errorf("gc --older-than 1500ms: %+v; want the killed writer's %d uploads aborted and %d objects deleted", rep.Totals, len(ups), len(objs))
			}
			left, err := st.ListUploads(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 1 || left[0].Key != young || left[0].UploadID != id {
				t.Fatalf("uploads after gc: %v; want only the young one at %s", left, young)
			}
			if objs, _, _ := st.List(ctx, "", ""); len(objs) != 0 {
				t.Fatalf("objects after gc: %v", objs)
			}
			tg.run(t, nil, "gc", "--older-than", "0s", "--json").must(t).decode(t, &rep)
			if rep.Totals.UploadsAborted != 1 {
				t.Fatalf("gc --older-than 0s: %+v; want the young upload aborted", rep.Totals)
			}
			if left, _ := st.ListUploads(ctx, ""); len(left) != 0 {
				t.Fatalf("uploads after gc --older-than 0s: %v", left)
			}
			t.Logf("%s: SIGKILL left %d uploads and %d objects; gc removed them and spared the young upload", ct.name, len(ups), len(objs))
		})
	}
}

// killMidUpload starts `durashuffle write` args on tg, feeds it
// crashInput without ever ending the stream, and kills it with SIGKILL
// once an upload is open under prefix and the objects before it are
// stored.
func killMidUpload(t *testing.T, tg target, st store.Store, prefix string, args []string) {
	t.Helper()
	ctx := context.Background()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cmd := exec.Command(bin, append(args, tg.flags...)...)
	cmd.Env = baseEnv(tg.env)
	cmd.Stdin = pr
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill() // in case a check below failed first
	batches := crashInput()
	defer func() {
		for _, b := range batches {
			b.Release()
		}
	}()
	go func() {
		w := ipc.NewWriter(pw, ipc.WithSchema(blobSchema))
		for _, b := range batches {
			if w.Write(b) != nil {
				return
			}
		}
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ups, err := st.ListUploads(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		objs, _, err := st.List(ctx, prefix, "")
		if err != nil {
			t.Fatal(err)
		}
		// An open upload and at least one more object under way: stored,
		// or in an upload of its own (a writer completes its uploads at
		// Commit, so mid-write there may be no stored object yet).
		if len(ups) > 0 && len(ups)+len(objs) >= 2 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("writer exited before it was killed: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no open upload after 60s: uploads %v, %d objects\n%s", ups, len(objs), stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	werr := <-exited
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer did not die of SIGKILL: %v", werr)
	}
	// Requests the writer had sent may still land (a part's body that
	// was on the wire, a create): wait until what the store holds stops
	// changing, so that the callers' counts are what gc will find.
	snapshot := func() string {
		ups, err := st.ListUploads(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		objs, _, err := st.List(ctx, prefix, "")
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(ups, objs)
	}
	last := snapshot()
	for deadline := time.Now().Add(30 * time.Second); ; {
		time.Sleep(500 * time.Millisecond)
		now := snapshot()
		if now == last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store still changes 30s after the writer was killed:\n%s", now)
		}
		last = now
	}
}
