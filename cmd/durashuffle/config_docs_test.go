package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
)

// druid maps keys to the Druid durable-storage property they replace.
var druid = map[string]string{
	"bucket":             "`druid.msq.intermediate.storage.bucket`",
	"prefix":             "`druid.msq.intermediate.storage.prefix`",
	"chunk_size":         "`druid.msq.intermediate.storage.chunkSize` (Druid default 100MiB)",
	"retry_max_attempts": "`druid.msq.intermediate.storage.maxRetry` (Druid default 10)",
	"upload_concurrency": "none: Druid's upload pool size is not configurable " +
		"([apache/druid#16481](https://github.com/apache/druid/pull/16481))",
	"max_buffered_chunks": "none: Druid bounds chunks on local disk under " +
		"`druid.msq.intermediate.storage.tempDir`; durashuffle holds them in memory",
	"spill_dir": "`druid.msq.intermediate.storage.tempDir`: Druid stages chunks there " +
		"before upload; durashuffle keeps only spilled sorted runs there",
	"endpoint":   "`druid.s3.endpoint.url` (deep-storage S3 client settings)",
	"region":     "`druid.s3.endpoint.signingRegion`",
	"path_style": "`druid.s3.enablePathStyleAccess`",
}

// groupDocs says what each of Config's groups configures, for the page's
// section headings.
var groupDocs = map[string]string{
	"Store":   "the object store: where stages live, how to reach and trust the endpoint, what every object put carries, the commit guard, and how each request is retried and timed out",
	"Write":   "the write path, from `Writer.Write` to the uploaded parts: chunks and their uploads, objects, frames, encoders, spilled runs, a failed writer's cleanup, and the memory limit of a process that writes",
	"Read":    "the read path: the ranged GETs of stored frames",
	"Hedge":   "hedged part uploads and range reads",
	"GC":      "what gc removes",
	"Sidecar": "the Arrow Flight sidecar (`serve`): its ports and their TLS, its token, its streams, and the memory store whose frames it serves to its peers",
}

// memoryConstants are the runtime headroom the memory bound adds and the
// unmanaged memory memory_limit auto keeps below it, as the library's
// exported arithmetic gives them.
func memoryConstants() (headroom, unmanaged durashuffle.Size) {
	def := durashuffle.DefaultConfig()
	empty := durashuffle.MemoryLoad{}
	headroom = def.MemoryBound(empty) - durashuffle.Size(def.BufferedChunks())*def.Write.ChunkSize - def.Sidecar.MemoryStoreBytes
	unmanaged = def.MemoryBound(empty) - def.SoftMemoryLimit(empty)
	return headroom, unmanaged
}

// configMarkdown renders docs/configuration.md from durashuffle.Config,
// so the documentation cannot drift from the code (a test compares
// them).
func configMarkdown(t *testing.T) string {
	headroom, unmanaged := memoryConstants()
	var b strings.Builder
	b.WriteString(`# Configuration

Generated from the ` + "`Config`" + ` struct (` + "`config.go`" + `) by ` + "`make docs`" + `; a test fails
when this page and the code disagree.

Every key can be set in a YAML file (` + "`--config FILE`" + `) or as an environment
variable, for any command, and as a flag on the commands that use it
(` + "`durashuffle CMD --help`" + ` lists them; the README's command-line section has
the table); flags win over the environment, which wins over the file.
Sizes take units (` + "`5MiB`" + `, ` + "`1GiB`" + `), durations Go syntax (` + "`100ms`" + `, ` + "`6h`" + `).
Invalid values are refused at start with the key, the allowed range and the
value, and the command exits with code 2.

The file is flat: every key at its top level, whatever its group
(` + "`chunk_size: 16MiB`" + `, not a ` + "`write:`" + ` section, which is refused). The groups
below are those of the library's ` + "`durashuffle.Config`" + `, whose field each key
sets (` + "`read_ahead`" + ` is ` + "`cfg.Read.Ahead`" + `).

Memory: a process holds at most ` + "`max_buffered_chunks x chunk_size`" + ` bytes of
chunks (defaults: 16 x 8 MiB = 128 MiB), plus ` + "`coalesce_budget`" + ` of unencoded
rows per open writer, plus about ` + "`2 x read_ahead x read_range_bytes`" + ` per open reader
(its ranged GETs, and as many logical bytes of frames decoded ahead of it).
` + "`memory_limit auto`" + ` (the default) makes ` + "`write`" + `, ` + "`demo`" + `, ` + "`serve`" + ` and ` + "`bench`" + ` set the
memory bound (the above plus ` + fmt.Sprint(headroom/durashuffle.MiB) + ` MiB of runtime headroom) less ` + fmt.Sprint(unmanaged/durashuffle.MiB) + ` MiB of
resident memory the runtime does not govern as the Go runtime's soft memory
limit, so the heap does not grow to twice what is live; see
[sizing.md](sizing.md#sizing-memory).
`)
	def := durashuffle.DefaultConfig()
	group := ""
	for _, k := range Keys() {
		if g, _, _ := strings.Cut(k.Go, "."); g != group {
			group = g
			if groupDocs[g] == "" {
				t.Fatalf("Config.%s has no entry in groupDocs", g)
			}
			fmt.Fprintf(&b, "\n## %s\n\n`Config.%s`: %s.\n\n", g, g, groupDocs[g])
			b.WriteString("| key | field | environment | flag | type | default | Druid equivalent | meaning |\n|---|---|---|---|---|---|---|---|\n")
		}
		v := k.Value(&def)
		if v == "" {
			v = "(none)"
		}
		d := druid[k.Name]
		if d == "" {
			d = "-"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | `--%s` | %s | `%s` | %s | %s |\n", k.Name, k.Go, k.Env, k.Flag, k.Type, v, d, k.Doc)
	}
	b.WriteString(`
Druid properties with no counterpart: ` + "`druid.msq.intermediate.storage.enable`" + ` and
` + "`.type`" + ` (durashuffle is always on and always S3-compatible). Local disk:
chunks are bounded in memory and never written to disk; with ` + "`spill: on`" + ` (the
default) a writer whose output passes ` + "`coalesce_budget`" + ` keeps its sorted runs in
` + "`spill_dir`" + ` until Commit, at most ` + "`spill_bytes`" + ` per process; with ` + "`spill: off`" + `
durashuffle writes no local files.
`)
	return b.String()
}

// TestConfigurationDocInSync fails when docs/configuration.md and the
// Config struct disagree. `make docs` rewrites the page.
func TestConfigurationDocInSync(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "configuration.md")
	want := configMarkdown(t)
	if os.Getenv("DURASHUFFLE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run make docs)", err)
	}
	if string(got) != want {
		t.Fatalf("%s is out of date with the Config struct: run make docs", path)
	}
	for _, k := range Keys() {
		if k.Doc == "" {
			t.Errorf("config key %s has no doc tag", k.Name)
		}
		if !strings.Contains(string(got), "| `"+k.Name+"` | `"+k.Go+"` | `"+k.Env+"` | `--"+k.Flag+"` |") {
			t.Errorf("%s has no row for key %s", path, k.Name)
		}
	}
	// The headroom and unmanaged memory the page states, derived from
	// the library's arithmetic, are those memory_limit's doc states (the
	// root package holds that doc to its constants).
	headroom, unmanaged := memoryConstants()
	for _, k := range Keys() {
		if k.Name != "memory_limit" {
			continue
		}
		for _, w := range []string{fmt.Sprintf("+ %d MiB", headroom/durashuffle.MiB), fmt.Sprintf("less %d MiB", unmanaged/durashuffle.MiB)} {
			if !strings.Contains(k.Doc, w) {
				t.Errorf("memory_limit's doc does not say %q, which the page derives:\n%s", w, k.Doc)
			}
		}
	}
}
