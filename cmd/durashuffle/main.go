// Command durashuffle writes, seals, reads and inspects durable shuffle
// stages on S3, and runs the demo that does all of it end to end.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2 // bad flag or argument, invalid configuration or ID
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// app is the state every command shares: streams, the config flags and
// the logger built from --log-level and --log-format.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	flags          *configFlags
	logLevel       string
	logFormat      string
	quiet          bool // --quiet: no progress bars
	log            *slog.Logger
	// clientOptions are added to those of every client the commands
	// open: in-process tests pass an HTTP client that audits requests.
	clientOptions []durashuffle.Option
	// transport, if set, carries a cloud store's requests (store azure
	// or gcs), as clientOptions' HTTP client carries S3's; counter, if
	// set, counts every client's requests and retries. In-process tests
	// set both.
	transport http.RoundTripper
	counter   *store.Counter
}

// usageError marks a mistake in the command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	return a.run(ctx, args)
}

// run executes the command line args with a's streams and returns the
// exit code.
func (a *app) run(ctx context.Context, args []string) int {
	stdin, stdout, stderr := a.stdin, a.stdout, a.stderr
	root := a.rootCommand()
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// The root takes none of the commands' flags: a flag after a
		// misspelt command is an unknown command.
		if c == root && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			return usagef("unknown command %q", args[0])
		}
		return usageError{err}
	})
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "durashuffle: %s\n", strings.TrimSpace(err.Error()))
	code := exitCode(err)
	if errors.As(err, new(usageError)) {
		// The help of the command that was given, which lists its flags.
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// exitCode classifies an error: 2 for usage, configuration and ID errors,
// 1 for everything else.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, new(usageError)),
		errors.Is(err, durashuffle.ErrInvalidConfig),
		errors.Is(err, manifest.ErrInvalidID):
		return exitUsage
	default:
		return exitFailure
	}
}

func (a *app) rootCommand() *cobra.Command {
	// Each command's configuration flags are its own, persistent so that
	// bench's scenarios take them: a command's help lists what it reads.
	configs := map[*cobra.Command]*configFlags{}
	root := &cobra.Command{
		Use:   "durashuffle",
		Short: "Durable shuffle storage for Arrow record batches on S3",
		Long: `durashuffle stores the output of distributed query stages (shuffle data
and query results) on S3 or any S3-compatible store: Arrow record batches
tagged with a partition are encoded into LZ4-compressed Arrow IPC frames,
cut into fixed-size chunks uploaded concurrently as multipart parts, and
committed by a manifest written last. Readers fetch a sealed stage's index
with one GET and stream any partition back.

Each command takes the flags of the configuration keys it uses: every
command the connection's (--endpoint, --bucket, ...); write, demo, serve
and bench the write path's (--chunk-size, ...); read, demo, serve and
bench the read path's (--read-ahead, ...); serve alone the sidecar's
(--listen, ...); 'durashuffle CMD --help' lists them. Every key can also
be set in a YAML file (--config) or as DURASHUFFLE_<KEY> in the
environment, for any command, with flags winning over the environment,
and the environment over the file.
Credentials and region follow the AWS SDK chain (AWS_ACCESS_KEY_ID,
AWS_PROFILE, AWS_REGION, ...).

Exit codes: 0 success, 1 failure, 2 usage or configuration error.`,
		Example: `  # The whole thing on an in-process S3 server, no setup needed:
  durashuffle demo

  # Against MinIO:
  AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin \
    durashuffle ls --endpoint http://127.0.0.1:9000 --path-style --bucket shuffle`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// The configuration flags of the command given (bench
			// write's are bench's).
			for c := cmd; c != nil && a.flags == nil; c = c.Parent() {
				a.flags = configs[c]
			}
			return a.setupLogging()
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetUsageTemplate(usageTemplate)
	pf := root.PersistentFlags()
	pf.StringVar(&a.logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	pf.StringVar(&a.logFormat, "log-format", "text", "log format on stderr: text or json")
	pf.BoolVar(&a.quiet, "quiet", false, "no progress bars (they are drawn only when stderr is a terminal)")
	pf.SortFlags = false

	for _, c := range []*cobra.Command{
		a.demoCommand(),
		a.writeCommand(),
		a.sealCommand(),
		a.combineCommand(),
		a.readCommand(),
		a.inspectCommand(),
		a.lsCommand(),
		a.gcCommand(),
		a.deleteQueryCommand(),
		a.benchCommand(),
		a.serveCommand(),
	} {
		if c.Args == nil {
			c.Args = noArgs
		}
		c.Flags().SortFlags = false
		c.PersistentFlags().SortFlags = false
		uses, ok := commandUses[c.Name()]
		if !ok {
			panic("durashuffle: command " + c.Name() + " has no entry in commandUses")
		}
		configs[c] = bindConfigFlags(c.PersistentFlags(), uses)
		root.AddCommand(c)
	}
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q", args[0])
		}
		return cmd.Help()
	}
	return root
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

func (a *app) setupLogging() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(a.logLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", a.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch a.logFormat {
	case "text":
		a.log = slog.New(slog.NewTextHandler(a.stderr, opts))
	case "json":
		a.log = slog.New(slog.NewJSONHandler(a.stderr, opts))
	default:
		return usagef("--log-format %q: want text or json", a.logFormat)
	}
	return nil
}

// config loads the configuration: defaults < --config file < environment
// < flags, validated.
func (a *app) config() (durashuffle.Config, error) {
	return a.flags.Load(a.getenv)
}

// applyMemoryLimit sets this process's soft memory limit from
// memory_limit for what the command runs (durashuffle.ApplyMemoryLimit: a
// GOMEMLIMIT in the environment wins) and logs the limit in force. Only
// the commands that own the process call it: write, demo, serve and the
// bench child. With an in-process S3 server (embedded), memory_limit auto
// sets none: the server keeps multipart parts in this process's memory
// until Complete, which no configuration bounds.
func (a *app) applyMemoryLimit(cfg durashuffle.Config, load durashuffle.MemoryLoad, embedded bool) {
	offForEmbedded := embedded && cfg.Write.MemoryLimit == durashuffle.MemoryLimitAuto
	if offForEmbedded {
		cfg.Write.MemoryLimit = durashuffle.MemoryLimitOff
	}
	limit, source := cfg.ApplyMemoryLimit(load, a.getenv)
	// The message says it in words ("none", not limit=0); the attributes
	// are for machines.
	what := "memory limit: " + limit.String() + " (" + source + ")"
	switch {
	case limit == 0 && offForEmbedded:
		what = "memory limit: none (memory_limit auto sets none with the embedded S3 server, which holds uploaded parts in this process)"
	case limit == 0:
		what = "memory limit: none (memory_limit off)"
	}
	a.log.Info(what, "limit", int64(limit), "source", source,
		"bound", int64(cfg.MemoryBound(load)), "embedded_s3", embedded)
}

// open loads the configuration and connects to the bucket.
func (a *app) open(ctx context.Context) (*durashuffle.Client, error) {
	cfg, err := a.config()
	if err != nil {
		return nil, err
	}
	a.log.Debug("connecting", "bucket", cfg.Store.Bucket, "endpoint", cfg.Store.Endpoint, "prefix", cfg.Store.Prefix)
	return a.openClient(ctx, cfg, nil)
}

// stageFlags are --query and --stage, validated before any request.
type stageFlags struct {
	query string
	stage int
}

func (s *stageFlags) bind(fs *pflag.FlagSet) {
	fs.StringVarP(&s.query, "query", "q", "", "query ID ([A-Za-z0-9._-], at most 128 characters)")
	fs.IntVarP(&s.stage, "stage", "s", 0, "stage number")
}

func (s *stageFlags) validate() error {
	if s.query == "" {
		return usagef("--query is required")
	}
	if err := manifest.ValidateID("query", s.query); err != nil {
		return err
	}
	return manifest.ValidateStage(s.stage)
}

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ratio is a/b, 0 when b is 0, rounded for display.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a / b)
}

func round(f float64) float64 {
	const p = 1000
	if f < 0 {
		return -float64(int64(-f*p+0.5)) / p
	}
	return float64(int64(f*p+0.5)) / p
}

// mib formats a byte count for humans.
func mib(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// perSecond is n bytes over secs seconds in MiB/s.
func perSecond(n int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return round(float64(n) / (1 << 20) / secs)
}
