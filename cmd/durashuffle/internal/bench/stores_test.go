package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// cloudBench is a cloud store's emulator as the bench's options name it.
type cloudBench struct {
	kind string
	// env is what the children need besides the configuration (the
	// account key).
	env []string
	cfg func(cfg *durashuffle.Config, bucket string)
}

func cloudBenches(t *testing.T) []cloudBench {
	az := testenv.Azurite(t)
	gcs := testenv.FakeGCS(t)
	return []cloudBench{
		{kind: KindAzure, env: []string{EnvAzureKey + "=" + az.Key}, cfg: func(cfg *durashuffle.Config, bucket string) {
			cfg.Store.Type, cfg.Store.AzureAccount, cfg.Store.Endpoint, cfg.Store.Bucket = KindAzure, az.Account, az.URL, bucket
		}},
		{kind: KindGCS, cfg: func(cfg *durashuffle.Config, bucket string) {
			cfg.Store.Type, cfg.Store.Endpoint, cfg.Store.Bucket = KindGCS, gcs, bucket
		}},
	}
}

// TestWriteAndReadOnEveryStore runs bench write and read on Azurite and
// fake-gcs-server through the shaped link at a tiny size: durashuffle
// against the store's own SDK helper. Both contenders store and read
// back the same bytes, counted by the store's own request names.
func TestWriteAndReadOnEveryStore(t *testing.T) {
	for _, cb := range cloudBenches(t) {
		t.Run(cb.kind, func(t *testing.T) {
			t.Setenv(EnvAzureKey, strings.TrimPrefix(strings.Join(cb.env, ""), EnvAzureKey+"="))
			o := smokeOptions(t)
			o.Stored = 8 << 20
			cb.cfg(&o.Config, "bench-"+cb.kind)
			o.Runner.Env = append(o.Runner.Env, cb.env...)
			baseline := Baselines[cb.kind][0]
			o.WriteContenders = []string{Durashuffle, baseline}
			_, rep := runScenario(t, o, ScenarioWrite)
			if rep.StoreKind != cb.kind || !strings.Contains(rep.Setup.Store, o.Config.Store.Endpoint) {
				t.Fatalf("report of store %q on %q, want %s at %s", rep.StoreKind, rep.Setup.Store, cb.kind, o.Config.Store.Endpoint)
			}
			ds, b := find(rep.Results, Durashuffle), find(rep.Results, baseline)
			// The baseline uploads the data set as encoded once beforehand;
			// durashuffle encodes it again, its frames in the order its
			// goroutines produced them, so the sizes differ slightly.
			if ds.StoredBytes == 0 || math.Abs(float64(b.StoredBytes)/float64(ds.StoredBytes)-1) > 0.05 {
				t.Fatalf("%s uploaded %d bytes, durashuffle stored %d", baseline, b.StoredBytes, ds.StoredBytes)
			}
			for _, r := range []*Result{ds, b} {
				if r.PutPerGiB <= 0 || r.LinkFraction <= 0 {
					t.Errorf("%s: %.2f PUT-class requests per GiB, %.3f of the link; requests %v", r.Name, r.PutPerGiB, r.LinkFraction, r.Requests)
				}
			}
			// Every request is named as the store names it: a PUT-class
			// one (PutPerGiB above) or a read, none unclassified.
			for op := range b.Requests {
				if strings.HasPrefix(op, "other") || strings.Contains(op, "comp=") {
					t.Errorf("%s sent a request the bench could not name: %s (%v)", baseline, op, b.Requests)
				}
			}
			if slices.ContainsFunc(rep.Targets, func(tg Target) bool { return strings.Contains(tg.Name, "transfermanager") }) ||
				!slices.ContainsFunc(rep.Targets, func(tg Target) bool { return tg.Name == "durashuffle / "+baseline }) {
				t.Errorf("targets %v: want durashuffle against %s alone", rep.Targets, baseline)
			}

			writeRep := rep
			_, rep = runScenario(t, o, ScenarioRead)
			var names []string
			for _, r := range rep.Results {
				names = append(names, r.Name)
			}
			if want := []string{Durashuffle, DurashuffleEncrypted, DurashuffleByPartition, baseline}; !slices.Equal(names, want) {
				t.Fatalf("read contenders %v, want %v", names, want)
			}
			ds, b = find(rep.Results, Durashuffle), find(rep.Results, baseline)
			if ds.StoredBytes == 0 || b.StoredBytes != ds.StoredBytes || ds.Rows == 0 {
				t.Fatalf("%s read %d bytes, durashuffle %d bytes (%d rows)", baseline, b.StoredBytes, ds.StoredBytes, ds.Rows)
			}
			if get := getOp(cb.kind); ds.Requests[get] == 0 || b.Requests[get] == 0 {
				t.Fatalf("no %s counted: durashuffle %v, %s %v", get, ds.Requests, baseline, b.Requests)
			}
			for _, tg := range rep.Targets {
				if strings.HasPrefix(tg.Name, "metadata GETs") && !tg.OK {
					t.Errorf("%s: %v", tg.Name, tg.Got)
				}
			}
			// --markdown: one section per store, write's and read's rows
			// kept from one run to the next; S3's targets table untouched.
			md := filepath.Join(t.TempDir(), "B.md")
			if err := os.WriteFile(md, []byte("<!-- bench:targets -->\nS3's\n<!-- /bench:targets -->\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, r := range []*Report{writeRep, rep} {
				if err := UpdateMarkdown(md, []*Report{r}, ""); err != nil {
					t.Fatal(err)
				}
			}
			mb, err := os.ReadFile(md)
			if err != nil {
				t.Fatal(err)
			}
			doc := string(mb)
			for _, want := range []string{"\nS3's\n", "<!-- bench:" + cb.kind + " -->", "| write | durashuffle |", "| write | " + baseline + " |",
				"| read | durashuffle |", "| read | " + baseline + " |"} {
				if !strings.Contains(doc, want) {
					t.Errorf("markdown lacks %q:\n%s", want, doc)
				}
			}
		})
	}
}

// TestBaselinesStoreTheBytes: each cloud store's SDK helper uploads the
// files it is given byte for byte (an object of several blocks or
// chunks, and one of less than one), and its download reads as many
// bytes as were stored.
func TestBaselinesStoreTheBytes(t *testing.T) {
	ctx := context.Background()
	for _, cb := range cloudBenches(t) {
		t.Run(cb.kind, func(t *testing.T) {
			t.Setenv(EnvAzureKey, strings.TrimPrefix(strings.Join(cb.env, ""), EnvAzureKey+"="))
			cfg := durashuffle.DefaultConfig()
			cfg.Write.ChunkSize = 5 * durashuffle.MiB
			cfg.Read.RangeBytes = 4 * durashuffle.MiB
			bucket := "baseline-" + cb.kind
			cb.cfg(&cfg, bucket)
			st, err := openKind(ctx, cfg, "", bucket, false, nil, &store.Counter{})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.(store.BucketMaker).EnsureBucket(ctx); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			dir := t.TempDir()
			j := &Job{Kind: "write", Name: Baselines[cb.kind][0], Bucket: bucket, Config: cfg}
			var want [][]byte
			for i, size := range []int{12<<20 + 3, 100 << 10} {
				b := make([]byte, size)
				for k := range b {
					b[k] = byte(rng.Uint32())
				}
				f := filepath.Join(dir, fmt.Sprint(i))
				if err := os.WriteFile(f, b, 0o600); err != nil {
					t.Fatal(err)
				}
				want = append(want, b)
				j.Files = append(j.Files, f)
				j.Keys = append(j.Keys, fmt.Sprintf("q/data-%d.arrows", i))
			}
			res, err := runJob(ctx, j)
			if err != nil {
				t.Fatal(err)
			}
			if res.StoredBytes != int64(len(want[0])+len(want[1])) {
				t.Fatalf("uploaded %d bytes, want %d", res.StoredBytes, len(want[0])+len(want[1]))
			}
			for i, key := range j.Keys {
				rc, err := st.GetRange(ctx, key, 0, -1)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("%s holds %d bytes that differ from the %d uploaded", key, len(got), len(want[i]))
				}
			}
			j.Kind, j.Files = "read", nil
			res, err = runJob(ctx, j)
			if err != nil {
				t.Fatal(err)
			}
			if res.StoredBytes != int64(len(want[0])+len(want[1])) || res.Requests[getOp(cb.kind)] < 4 {
				t.Fatalf("read %d bytes with %v, want %d bytes in ranges of 4 MiB", res.StoredBytes, res.Requests, len(want[0])+len(want[1]))
			}
		})
	}
}
