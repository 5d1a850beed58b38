package main

import (
	"errors"
	"fmt"

	"github.com/durashuffle/durashuffle"
	"github.com/spf13/pflag"
)

// configFlags binds a flag per key a command uses on fs. After parsing,
// Load copies the flags the user set onto a config, so flags win over file
// and environment.
type configFlags struct {
	fs    *pflag.FlagSet
	vals  durashuffle.Config
	file  string
	bound []Key // the keys that have a flag on fs
	// defaults, if set, changes DefaultConfig for one command (serve's
	// memory store) before the file, environment and flags apply.
	defaults func(*durashuffle.Config)
}

// keyUse is what a configuration key configures. A command binds the
// flags of the uses it has (commandUses), so that its help lists what it
// reads; the file and the environment may set every key for every command,
// as a config file shared by all of them does.
type keyUse uint

const (
	// useStore: the connection (bucket, endpoint, TLS, timeouts, retries),
	// for every command.
	useStore keyUse = 1 << iota
	// usePut: objects a command puts and commits (data, worker and stage
	// manifests): their server-side encryption and the commit guard.
	usePut
	// useWrite: the write path, from Write to the uploaded parts: chunks,
	// uploads, frames, encoders, the process's memory limit.
	useWrite
	// useRead: the read path, ranged GETs of stored frames.
	useRead
	// useHedge: hedged part uploads and range reads.
	useHedge
	// useGC: what gc removes.
	useGC
	// useSidecar: serve's Flight and metrics ports, their TLS, its
	// streams and its memory store.
	useSidecar
	// useAuth: the sidecar's bearer token, which serve checks and
	// inspect --sidecar sends.
	useAuth
	// useKey: the key frames are sealed and opened with (client-side
	// encryption), for the commands that write or read frames.
	useKey
)

// keyUses is the use of every key, one table: a key missing here gets no
// flag anywhere (a test fails).
var keyUses = map[string]keyUse{
	"store": useStore, "azure_account": useStore, "gcs_project": useStore,
	"bucket": useStore, "prefix": useStore, "endpoint": useStore, "region": useStore,
	"path_style": useStore, "insecure_skip_verify": useStore, "ca_file": useStore,
	"retry_max_attempts": useStore, "retry_base_delay": useStore, "retry_max_delay": useStore,
	"request_timeout": useStore, "connect_timeout": useStore, "first_byte_timeout": useStore,

	"sse": usePut, "sse_kms_key_id": usePut, "commit_guard": usePut,

	"chunk_size": useWrite, "upload_concurrency": useWrite, "max_buffered_chunks": useWrite,
	"max_object_size": useWrite, "max_part_size": useWrite, "key_spread": useWrite, "frame_target_bytes": useWrite,
	"coalesce_budget": useWrite, "memory_limit": useWrite, "encode_concurrency": useWrite,
	"compression": useWrite, "checksum": useWrite, "cleanup_timeout": useWrite,
	"spill": useWrite, "spill_dir": useWrite, "spill_bytes": useWrite,

	"read_range_bytes": useRead, "read_span_bytes": useRead, "read_ahead": useRead, "read_gap_bytes": useRead,

	"hedge_factor": useHedge, "hedge_min_delay": useHedge,

	"results_retention": useGC,

	"listen": useSidecar, "metrics_listen": useSidecar, "max_streams": useSidecar,
	"max_message_bytes": useSidecar, "shutdown_grace": useSidecar, "tls_cert_file": useSidecar,
	"tls_key_file": useSidecar, "tls_client_ca_file": useSidecar,
	"stream_first_message_timeout": useSidecar, "stream_idle_timeout": useSidecar,
	"memory_store_bytes": useSidecar, "advertise_addr": useSidecar,

	"auth_token": useAuth,

	"encryption_key": useKey, "encryption_key_file": useKey, "encryption_kms_key_id": useKey, "encryption_kms_endpoint": useKey,
}

// commandUses are the uses of each command that takes configuration
// flags: the keys its code reads.
var commandUses = map[string]keyUse{
	"demo":         useStore | usePut | useWrite | useRead | useHedge, // --encrypt, or the encryption keys from the file or the environment
	"write":        useStore | usePut | useWrite | useHedge | useKey,
	"seal":         useStore | usePut,                      // puts the stage manifest and index
	"combine":      useStore | usePut | useWrite | useRead, // spill_dir and spill_bytes hold tasks laid out on disk, key_spread names its objects; read_range_bytes and read_ahead size its predictions
	"read":         useStore | useRead | useHedge | useKey,
	"inspect":      useStore | useAuth, // manifests and the index, no frames
	"ls":           useStore,
	"gc":           useStore | useGC,
	"delete-query": useStore,
	"bench":        useStore | usePut | useWrite | useRead | useHedge | useKey,
	// The sidecar writes, reads, runs gc and delete-query as actions.
	"serve": useStore | usePut | useWrite | useRead | useHedge | useGC | useSidecar | useAuth | useKey,
}

// bindConfigFlags registers --config and one flag per key of the given
// uses on fs, none that fs already has.
func bindConfigFlags(fs *pflag.FlagSet, uses keyUse) *configFlags {
	f := &configFlags{fs: fs, vals: durashuffle.DefaultConfig()}
	fs.StringVar(&f.file, "config", "", "YAML config file (keys as in docs/configuration.md)")
	for _, k := range Keys() {
		// A command's own flag of the same name wins (bench's
		// --memory-limit takes a list to compare).
		if keyUses[k.Name]&uses == 0 || fs.Lookup(k.Flag) != nil {
			continue
		}
		f.bound = append(f.bound, k)
		v := k.field(&f.vals).Addr().Interface()
		usage := oneLine(k.Doc) + " (" + k.Env + "; docs/configuration.md)"
		switch p := v.(type) {
		case *durashuffle.Size, *durashuffle.Duration, *durashuffle.MemoryLimit:
			fs.Var(textFlag{p.(textValue), k.Type}, k.Flag, usage)
		case *string:
			fs.StringVar(p, k.Flag, *p, usage)
		case *int:
			fs.IntVar(p, k.Flag, *p, usage)
		case *float64:
			fs.Float64Var(p, k.Flag, *p, usage)
		case *bool:
			fs.BoolVar(p, k.Flag, *p, usage)
		}
		fs.SetAnnotation(k.Flag, configUseAnnotation, []string{useName(keyUses[k.Name])})
	}
	return f
}

// Load builds the configuration: defaults, then the --config file, then
// the environment, then flags the user set; and validates it.
func (f *configFlags) Load(getenv func(string) string) (durashuffle.Config, error) {
	c := durashuffle.DefaultConfig()
	if f.defaults != nil {
		f.defaults(&c)
	}
	if f.file != "" {
		if err := c.LoadFile(f.file); err != nil {
			return c, err
		}
	}
	if err := c.LoadEnv(getenv); err != nil {
		return c, err
	}
	for _, k := range f.bound {
		if f.fs.Changed(k.Flag) {
			k.field(&c).Set(k.field(&f.vals))
		}
	}
	// An empty endpoint in a file or the environment means the AWS chain,
	// as when it is not set; an empty --endpoint is a command line that
	// lost its value (an unset shell variable), and would send every
	// request to AWS.
	if fl := f.fs.Lookup("endpoint"); fl != nil && fl.Changed && c.Store.Endpoint == "" {
		return c, errors.Join(fmt.Errorf("%w: endpoint: --endpoint is given but empty; omit it to follow the AWS chain (AWS_ENDPOINT_URL, profile) or give a URL such as http://127.0.0.1:9000",
			durashuffle.ErrInvalidConfig), c.Validate())
	}
	return c, c.Validate()
}
