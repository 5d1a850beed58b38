package main

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/durashuffle/durashuffle"
	"github.com/spf13/pflag"
)

// configFlags binds a flag per key on fs. After parsing, Apply copies the flags
// the user set onto a config, so flags win over file and environment.
type configFlags struct {
	fs   *pflag.FlagSet
	vals durashuffle.Config
	file string
	// defaults, if set, changes DefaultConfig for one command (serve's
	// memory store) before the file, environment and flags apply.
	defaults func(*durashuffle.Config)
}

// sidecarKeys are the keys only serve reads: its Flight and metrics
// ports, their TLS, its streams and its memory store. Only serve has
// their flags; the file and the environment may set them for any command.
var sidecarKeys = map[string]bool{
	"listen": true, "metrics_listen": true, "auth_token": true, "max_streams": true,
	"max_message_bytes": true, "shutdown_grace": true, "tls_cert_file": true,
	"tls_key_file": true, "tls_client_ca_file": true, "stream_first_message_timeout": true,
	"stream_idle_timeout": true, "memory_store_bytes": true, "advertise_addr": true,
}

// bindConfigFlags registers --config and one flag per key on fs, the
// sidecar's keys only if sidecar is set, and none that fs already has.
func bindConfigFlags(fs *pflag.FlagSet, sidecar bool) *configFlags {
	f := &configFlags{fs: fs, vals: durashuffle.DefaultConfig()}
	fs.StringVar(&f.file, "config", "", "YAML config file (keys as in docs/configuration.md)")
	for _, k := range durashuffle.Keys() {
		// A command's own flag of the same name wins (bench's
		// --memory-limit takes a list to compare).
		if sidecarKeys[k.Name] && !sidecar || fs.Lookup(k.Flag) != nil {
			continue
		}
		v := reflect.ValueOf(&f.vals).Elem().FieldByName(k.Go).Addr().Interface()
		usage := k.Doc + " (" + k.Env + ")"
		switch p := v.(type) {
		case *durashuffle.Size:
			fs.Var(p, k.Flag, usage)
		case *durashuffle.Duration:
			fs.Var(p, k.Flag, usage)
		case *durashuffle.MemoryLimit:
			fs.Var(p, k.Flag, usage)
		case *string:
			fs.StringVar(p, k.Flag, *p, usage)
		case *int:
			fs.IntVar(p, k.Flag, *p, usage)
		case *float64:
			fs.Float64Var(p, k.Flag, *p, usage)
		case *bool:
			fs.BoolVar(p, k.Flag, *p, usage)
		}
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
	src := reflect.ValueOf(&f.vals).Elem()
	dst := reflect.ValueOf(&c).Elem()
	for _, k := range durashuffle.Keys() {
		if fl := f.fs.Lookup(k.Flag); fl != nil && fl.Changed {
			dst.FieldByName(k.Go).Set(src.FieldByName(k.Go))
		}
	}
	// An empty endpoint in a file or the environment means the AWS chain,
	// as when it is not set; an empty --endpoint is a command line that
	// lost its value (an unset shell variable), and would send every
	// request to AWS.
	if fl := f.fs.Lookup("endpoint"); fl != nil && fl.Changed && c.Endpoint == "" {
		return c, errors.Join(fmt.Errorf("%w: endpoint: --endpoint is given but empty; omit it to follow the AWS chain (AWS_ENDPOINT_URL, profile) or give a URL such as http://127.0.0.1:9000",
			durashuffle.ErrInvalidConfig), c.Validate())
	}
	return c, c.Validate()
}
