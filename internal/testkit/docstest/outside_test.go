package docstest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// The modules of the command line and the bench that a program importing
// only the library must not get: the command line's (cobra, pflag, mpb,
// pty, x/term), the bench's (toxiproxy, zerolog, gonum plot and its
// fonts, LaTeX and PDF writers).
var cliOnlyModules = []string{
	"github.com/spf13/cobra", "github.com/spf13/pflag", "github.com/vbauerster/mpb",
	"github.com/creack/pty", "golang.org/x/term", "github.com/Shopify/toxiproxy",
	"github.com/rs/zerolog", "gonum.org/v1/plot", "codeberg.org/go-fonts",
	"codeberg.org/go-latex", "codeberg.org/go-pdf", "git.sr.ht/~sbinet/gg",
}

// TestOutsideModule builds examples/engine, a module of its own that
// requires durashuffle (through a replace of the repository root) and
// uses only its exported API, exactly as a program outside the
// repository would: without the workspace, after checking that its
// go.mod and go.sum are what go mod tidy makes them and that go.sum names
// none of the command line's modules. Then it runs the program against
// MinIO: three workers write four partitions, the stage is sealed, and a
// partition is read back and checked row by row.
func TestOutsideModule(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "examples", "engine")
	gocmd := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		// Outside the repository there is no go.work: build as there.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := gocmd(ctx, "mod", "tidy", "-diff").CombinedOutput(); err != nil {
		t.Fatalf("examples/engine: go mod tidy -diff: %v (its go.mod or go.sum is not what tidy makes them)\n%s", err, out)
	}
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cliOnlyModules {
		if bytes.Contains(sum, []byte(m+" ")) || bytes.Contains(sum, []byte(m+"/")) {
			t.Errorf("examples/engine/go.sum names %s: a program importing only the library gets the command line's modules", m)
		}
	}
	if !bytes.Contains(sum, []byte("github.com/aws/aws-sdk-go-v2 ")) || !bytes.Contains(sum, []byte("github.com/apache/arrow-go/v18 ")) {
		t.Errorf("examples/engine/go.sum lacks the SDK or arrow-go: not the go.sum of a durashuffle program?\n%s", sum)
	}
	bin := filepath.Join(t.TempDir(), "engine")
	if out, err := gocmd(ctx, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("examples/engine: go build: %v\n%s", err, out)
	}

	t.Run("minio", func(t *testing.T) {
		ep := testenv.MinIO(t)
		run := exec.CommandContext(ctx, bin, "-endpoint", ep.URL, "-bucket", ep.Bucket, "-query", "outside", "-partition", "1")
		run.Env = append(os.Environ(), "AWS_REGION=us-east-1")
		if ep.AccessKeyID != "" {
			run.Env = append(run.Env, "AWS_ACCESS_KEY_ID="+ep.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+ep.SecretAccessKey)
		}
		var stdout, stderr bytes.Buffer
		run.Stdout, run.Stderr = &stdout, &stderr
		if err := run.Run(); err != nil {
			t.Fatalf("examples/engine against MinIO: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		out := stdout.String()
		t.Logf("examples/engine:\n%s", out)
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^sealed outside stage 0: 30000 rows, 3 workers, 4 partitions$`),
			regexp.MustCompile(`(?m)^partition 1: 7500 rows read back, every one as written$`),
		} {
			if !want.MatchString(out) {
				t.Errorf("output lacks %q", want)
			}
		}

		// What the program left in the bucket is a committed stage: a stage
		// manifest and no open upload.
		st, _ := ep.NewStore(t)
		objs, _, err := st.List(ctx, "durashuffle/outside/", "")
		if err != nil {
			t.Fatal(err)
		}
		var manifests int
		for _, o := range objs {
			if strings.HasSuffix(o.Key, "/stage-0/manifest.json") {
				manifests++
			}
		}
		if manifests != 1 {
			t.Errorf("%d stage manifests under durashuffle/outside/, want 1: %d objects", manifests, len(objs))
		}
		if ups, err := st.ListUploads(ctx, "durashuffle/"); err != nil || len(ups) != 0 {
			t.Errorf("uploads left open: %v %v", ups, err)
		}
	})
}

func TestMain(m *testing.M) { testenv.Main(m) }
