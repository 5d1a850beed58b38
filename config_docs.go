package durashuffle

import (
	"fmt"
	"strings"
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

// configMarkdown renders docs/configuration.md from the struct, so the
// documentation cannot drift from the code (a test compares them).
func configMarkdown() string {
	var b strings.Builder
	b.WriteString(`# Configuration

Generated from ` + "`config.go`" + ` by ` + "`make docs`" + `; a test fails when
this page and the code disagree.

Every key can be set in a YAML file (` + "`--config FILE`" + `) or as an environment
variable, for any command, and as a flag on the commands that use it
(` + "`durashuffle CMD --help`" + ` lists them; the README's command-line section has
the table); flags win over the environment, which wins over the file.
Sizes take units (` + "`5MiB`" + `, ` + "`1GiB`" + `), durations Go syntax (` + "`100ms`" + `, ` + "`6h`" + `).
Invalid values are refused at start with the key, the allowed range and the
value, and the command exits with code 2.

Memory: a process holds at most ` + "`max_buffered_chunks x chunk_size`" + ` bytes of
chunks (defaults: 16 x 8 MiB = 128 MiB), plus ` + "`coalesce_budget`" + ` of unencoded
rows per open writer, plus about ` + "`2 x read_ahead x read_range_bytes`" + ` per open reader
(its ranged GETs, and as many logical bytes of frames decoded ahead of it).
` + "`memory_limit auto`" + ` (the default) makes ` + "`write`" + `, ` + "`demo`" + `, ` + "`serve`" + ` and ` + "`bench`" + ` set the
memory bound (the above plus ` + fmt.Sprint(runtimeHeadroom/MiB) + ` MiB of runtime headroom) less ` + fmt.Sprint(unmanagedMemory/MiB) + ` MiB of
resident memory the runtime does not govern as the Go runtime's soft memory
limit, so the heap does not grow to twice what is live; see operations.md,
"Sizing memory".

| key | environment | flag | type | default | Druid equivalent | meaning |
|---|---|---|---|---|---|---|
`)
	def := DefaultConfig()
	for _, k := range Keys() {
		v := def.Value(k)
		if v == "" {
			v = "(none)"
		}
		d := druid[k.Name]
		if d == "" {
			d = "-"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | `--%s` | %s | `%s` | %s | %s |\n", k.Name, k.Env, k.Flag, k.Type, v, d, k.Doc)
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
