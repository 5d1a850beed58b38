package docstest

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// metricsDoc is the page whose metrics table this test keeps honest,
// relative to the repository's root.
const metricsDoc = "docs/metrics.md"

// repoFile is the path of rel, a slash-separated path from the
// repository's root.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

// documented is one row of the metrics table.
type documented struct {
	typ    string
	labels []string
}

// metricsTable parses the table under the header
// "| metric | type | labels | meaning |".
func metricsTable(t *testing.T) map[string]documented {
	t.Helper()
	f, err := os.Open(repoFile(t, metricsDoc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]documented{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !in {
			in = regexp.MustCompile(`^\|\s*metric\s*\|\s*type\s*\|\s*labels\s*\|\s*meaning\s*\|$`).MatchString(line)
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		var labels []string
		for l := range strings.SplitSeq(cells[2], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "-" && l != "none" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		if _, dup := out[name]; dup {
			t.Errorf("%s: metric %s documented twice", metricsDoc, name)
		}
		out[name] = documented{typ: strings.TrimSpace(cells[1]), labels: labels}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no table headed | metric | type | labels | meaning |", metricsDoc)
	}
	return out
}

// scraped builds a registry with metrics, makes every metric it
// can reach produce a sample (labelled ones appear only then), and returns
// the durashuffle_ families by name.
func scraped(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	m := metrics.New()
	m.Queued(1)
	m.Buffered(8 << 20)
	m.PartDone(time.Millisecond, 10*time.Millisecond)
	m.Uploaded(8 << 20)
	m.ReadBytes(1 << 20)
	c := &store.Counter{}
	c.Request("PutObject", 200)
	c.Retry("UploadPart", "SlowDown")
	m.WatchCounter(c)
	m.WatchConcurrency(func() int { return 8 })
	m.WatchCommitGuard([]string{"unprobed", "enforced"}, func() string { return "enforced" })
	// Sidecar events, through interfaces so that a change of their
	// signatures shows up as an unscraped metric, not a build failure.
	var x any = m
	if s, ok := x.(interface{ StreamStarted(string) }); ok {
		s.StreamStarted("DoPut")
	}
	if s, ok := x.(interface{ StreamWaiting(int) }); ok {
		s.StreamWaiting(1)
	}
	if s, ok := x.(interface{ Call(string, string) }); ok {
		s.Call("DoPut", "OK")
	}
	if s, ok := x.(interface{ Rows(string, int64) }); ok {
		s.Rows("DoPut", 1)
	}
	if s, ok := x.(interface{ PutDone(bool) }); ok {
		s.PutDone(true)
		s.PutDone(false)
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "durashuffle_") {
			out[f.GetName()] = f
		}
	}
	return out
}

// declared lists the durashuffle_ metric names spelled out in
// metrics' source: the ones no event above reached still count.
func declared(t *testing.T) []string {
	t.Helper()
	dir := repoFile(t, "internal/metrics")
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^durashuffle_[a-z0-9_]+$`)
	var out []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && name.MatchString(s) && !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
			return true
		})
	}
	return out
}

func TestMetricsDocumented(t *testing.T) {
	docs := metricsTable(t)
	fams := scraped(t)
	exported := declared(t)
	for name := range fams {
		if !slices.Contains(exported, name) {
			exported = append(exported, name)
		}
	}
	slices.Sort(exported)

	for _, name := range exported {
		d, ok := docs[name]
		if !ok {
			t.Errorf("metric %s is exported by metrics but not documented in %s", name, metricsDoc)
			continue
		}
		f, ok := fams[name]
		if !ok {
			t.Logf("metric %s: no sample in the test registry; its type and labels are not checked", name)
			continue
		}
		if typ := strings.ToLower(f.GetType().String()); typ != d.typ {
			t.Errorf("metric %s: %s says %s, the registry has a %s", name, metricsDoc, d.typ, typ)
		}
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		slices.Sort(labels)
		if !slices.Equal(labels, d.labels) {
			t.Errorf("metric %s: %s lists labels %v, the registry has %v", name, metricsDoc, d.labels, labels)
		}
	}
	for name := range docs {
		if !slices.Contains(exported, name) {
			t.Errorf("metric %s is documented in %s but metrics does not export it", name, metricsDoc)
		}
	}
	if len(fams) < 9 {
		t.Errorf("the test registry has only %d durashuffle metrics: %v", len(fams), exported)
	}
}
