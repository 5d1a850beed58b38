package config

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestMemoryLimitParse(t *testing.T) {
	cases := []struct {
		in   string
		want MemoryLimit
		text string
		err  bool
	}{
		{"auto", MemoryLimitAuto, "auto", false},
		{" AUTO ", MemoryLimitAuto, "auto", false},
		{"off", MemoryLimitOff, "off", false},
		{"512MiB", MemoryLimit(512 * MiB), "512MiB", false},
		{"1.5GiB", MemoryLimit(GiB + GiB/2), "1536MiB", false},
		{"0", 0, "", true},
		{"lots", 0, "", true},
		{"-1GiB", 0, "", true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			var m MemoryLimit
			err := m.Set(c.in)
			if (err != nil) != c.err {
				t.Fatalf("Set(%q) error = %v, want error %v", c.in, err, c.err)
			}
			if c.err {
				return
			}
			if m != c.want || m.String() != c.text {
				t.Fatalf("Set(%q) = %d (%q), want %d (%q)", c.in, m, m, c.want, c.text)
			}
		})
	}
}

func TestMemoryLimitDefaultAndValidate(t *testing.T) {
	if Default().MemoryLimit != MemoryLimitAuto {
		t.Fatalf("default memory_limit = %v, want auto", Default().MemoryLimit)
	}
	c := Default()
	c.MemoryLimit = MemoryLimit(16 * MiB)
	err := c.Validate()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "memory_limit must be auto, off or at least 32MiB, got 16MiB") {
		t.Fatalf("Validate() = %v", err)
	}
	c.MemoryLimit = MemoryLimitOff
	if err := c.Validate(); err != nil {
		t.Fatalf("off: %v", err)
	}
}

func TestMemoryLimitSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("memory_limit: 400MiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(env map[string]string, args ...string) MemoryLimit {
		t.Helper()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f := BindFlags(fs)
		if err := fs.Parse(append([]string{"--config", file}, args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.Load(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return cfg.MemoryLimit
	}
	if got := load(nil); got != MemoryLimit(400*MiB) {
		t.Errorf("file: %v", got)
	}
	if got := load(map[string]string{"DURASHUFFLE_MEMORY_LIMIT": "off"}); got != MemoryLimitOff {
		t.Errorf("env: %v", got)
	}
	if got := load(map[string]string{"DURASHUFFLE_MEMORY_LIMIT": "off"}, "--memory-limit", "auto"); got != MemoryLimitAuto {
		t.Errorf("flag: %v", got)
	}
}

func TestMemoryBound(t *testing.T) {
	d := Default()
	cases := []struct {
		name string
		cfg  func(*Config)
		load Load
		want Size
	}{
		// The benchmark issue's bound: 16 x 8 MiB + 64 MiB + 96 MiB.
		{"one writer, defaults", nil, Load{Writers: 1}, 288 * MiB},
		{"four writers", nil, Load{Writers: 4}, 128*MiB + 4*64*MiB + 96*MiB},
		{"readers", nil, Load{Readers: 8}, 128*MiB + 8*4*8*MiB + 96*MiB},
		{"sidecar streams", nil, Load{Streams: 8}, 128*MiB + 8*(64*MiB+64*MiB) + 96*MiB},
		{"sidecar, readers larger than writers", func(c *Config) { c.CoalesceBudget = 16 * MiB; c.MaxMessageBytes = 4 * MiB }, Load{Streams: 2}, 128*MiB + 2*(32*MiB+4*MiB) + 96*MiB},
		{"explicit buffers", func(c *Config) { c.MaxBufferedChunks = 4; c.ChunkSize = 5 * MiB }, Load{Writers: 1}, 20*MiB + 64*MiB + 96*MiB},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := d
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			if got := cfg.MemoryBound(c.load); got != c.want {
				t.Fatalf("MemoryBound(%+v) = %v, want %v", c.load, got, c.want)
			}
		})
	}
}

func TestSoftMemoryLimit(t *testing.T) {
	c := Default()
	one := Load{Writers: 1}
	if got, want := c.SoftMemoryLimit(one), 288*MiB-UnmanagedMemory; got != want {
		t.Errorf("auto: %v, want the bound less %v: %v", got, UnmanagedMemory, want)
	}
	c.MemoryLimit = MemoryLimit(1 * GiB)
	if got := c.SoftMemoryLimit(one); got != GiB {
		t.Errorf("1GiB: %v", got)
	}
	c.MemoryLimit = MemoryLimitOff
	if got := c.SoftMemoryLimit(one); got != 0 {
		t.Errorf("off: %v", got)
	}
}

func TestApplyMemoryLimit(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	noEnv := func(string) string { return "" }

	debug.SetMemoryLimit(1 << 40)
	c := Default()
	got := c.ApplyMemoryLimit(Load{Writers: 1}, noEnv)
	if want := c.SoftMemoryLimit(Load{Writers: 1}); got.Limit != want || got.Source != "memory_limit auto" || debug.SetMemoryLimit(-1) != int64(want) {
		t.Fatalf("auto: %+v, runtime limit %d, want %d", got, debug.SetMemoryLimit(-1), want)
	}

	c.MemoryLimit = MemoryLimit(700 * MiB)
	got = c.ApplyMemoryLimit(Load{Writers: 1}, noEnv)
	if got.Limit != 700*MiB || got.Source != "memory_limit" || debug.SetMemoryLimit(-1) != int64(700*MiB) {
		t.Fatalf("700MiB: %+v, runtime limit %d", got, debug.SetMemoryLimit(-1))
	}

	// GOMEMLIMIT in the environment: the runtime applied it at start
	// (here: 1 TiB, set above); the configuration must not override it.
	debug.SetMemoryLimit(1 << 40)
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "1TiB"
		}
		return ""
	}
	got = c.ApplyMemoryLimit(Load{Writers: 1}, env)
	if got.Source != "GOMEMLIMIT" || got.Limit != TiB || debug.SetMemoryLimit(-1) != 1<<40 {
		t.Fatalf("GOMEMLIMIT set: %+v, runtime limit %d, want 1TiB untouched", got, debug.SetMemoryLimit(-1))
	}

	c.MemoryLimit = MemoryLimitOff
	got = c.ApplyMemoryLimit(Load{Writers: 1}, noEnv)
	if got.Source != "off" || got.Limit != 0 || debug.SetMemoryLimit(-1) != 1<<40 {
		t.Fatalf("off: %+v, runtime limit %d: off must leave the runtime's limit alone", got, debug.SetMemoryLimit(-1))
	}
}
