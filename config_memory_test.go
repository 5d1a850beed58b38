package durashuffle

import (
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
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
			err := m.UnmarshalText([]byte(c.in))
			if (err != nil) != c.err {
				t.Fatalf("UnmarshalText(%q) error = %v, want error %v", c.in, err, c.err)
			}
			if c.err {
				return
			}
			if m != c.want || m.String() != c.text {
				t.Fatalf("UnmarshalText(%q) = %d (%q), want %d (%q)", c.in, m, m, c.want, c.text)
			}
		})
	}
}

func TestMemoryLimitDefaultAndValidate(t *testing.T) {
	if DefaultConfig().Write.MemoryLimit != MemoryLimitAuto {
		t.Fatalf("default memory_limit = %v, want auto", DefaultConfig().Write.MemoryLimit)
	}
	c := DefaultConfig()
	c.Write.MemoryLimit = MemoryLimit(16 * MiB)
	err := c.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "memory_limit must be auto, off or at least 32MiB, got 16MiB") {
		t.Fatalf("Validate() = %v", err)
	}
	c.Write.MemoryLimit = MemoryLimitOff
	if err := c.Validate(); err != nil {
		t.Fatalf("off: %v", err)
	}
}

func TestMemoryBound(t *testing.T) {
	d := DefaultConfig()
	cases := []struct {
		name string
		cfg  func(*Config)
		load MemoryLoad
		want Size
	}{
		// The defaults' bound for one writer: 16 x 8 MiB + 64 MiB + 96 MiB.
		{"one writer, defaults", nil, MemoryLoad{Writers: 1}, 288 * MiB},
		{"four writers", nil, MemoryLoad{Writers: 4}, 128*MiB + 4*64*MiB + 96*MiB},
		{"readers", nil, MemoryLoad{Readers: 8}, 128*MiB + 8*2*4*8*MiB + 96*MiB},
		{"sidecar streams", nil, MemoryLoad{Streams: 8}, 128*MiB + 8*(64*MiB+64*MiB) + 96*MiB},
		{"sidecar, readers larger than writers", func(c *Config) { c.Write.CoalesceBudget = 16 * MiB; c.Sidecar.MaxMessageBytes = 4 * MiB }, MemoryLoad{Streams: 2}, 128*MiB + 2*(2*32*MiB+4*MiB) + 96*MiB},
		{"memory store", func(c *Config) { c.Sidecar.MemoryStoreBytes = 1 * GiB }, MemoryLoad{Streams: 8}, 128*MiB + 8*(64*MiB+64*MiB) + 1*GiB + 96*MiB},
		{"explicit buffers", func(c *Config) { c.Write.MaxBufferedChunks = 4; c.Write.ChunkSize = 5 * MiB }, MemoryLoad{Writers: 1}, 20*MiB + 64*MiB + 96*MiB},
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
	c := DefaultConfig()
	one := MemoryLoad{Writers: 1}
	if got, want := c.SoftMemoryLimit(one), 288*MiB-unmanagedMemory; got != want {
		t.Errorf("auto: %v, want the bound less %v: %v", got, unmanagedMemory, want)
	}
	c.Write.MemoryLimit = MemoryLimit(1 * GiB)
	if got := c.SoftMemoryLimit(one); got != GiB {
		t.Errorf("1GiB: %v", got)
	}
	c.Write.MemoryLimit = MemoryLimitOff
	if got := c.SoftMemoryLimit(one); got != 0 {
		t.Errorf("off: %v", got)
	}
}

func TestApplyMemoryLimit(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	noEnv := func(string) string { return "" }

	debug.SetMemoryLimit(1 << 40)
	c := DefaultConfig()
	lim, src := c.ApplyMemoryLimit(MemoryLoad{Writers: 1}, noEnv)
	if want := c.SoftMemoryLimit(MemoryLoad{Writers: 1}); lim != want || src != "memory_limit auto" || debug.SetMemoryLimit(-1) != int64(want) {
		t.Fatalf("auto: %v (%s), runtime limit %d, want %d", lim, src, debug.SetMemoryLimit(-1), want)
	}

	c.Write.MemoryLimit = MemoryLimit(700 * MiB)
	lim, src = c.ApplyMemoryLimit(MemoryLoad{Writers: 1}, noEnv)
	if lim != 700*MiB || src != "memory_limit" || debug.SetMemoryLimit(-1) != int64(700*MiB) {
		t.Fatalf("700MiB: %v (%s), runtime limit %d", lim, src, debug.SetMemoryLimit(-1))
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
	lim, src = c.ApplyMemoryLimit(MemoryLoad{Writers: 1}, env)
	if src != "GOMEMLIMIT" || lim != 1<<40 || debug.SetMemoryLimit(-1) != 1<<40 {
		t.Fatalf("GOMEMLIMIT set: %v (%s), runtime limit %d, want 1TiB untouched", lim, src, debug.SetMemoryLimit(-1))
	}

	// off leaves the limit the process has, and says which it is.
	c.Write.MemoryLimit = MemoryLimitOff
	lim, src = c.ApplyMemoryLimit(MemoryLoad{Writers: 1}, noEnv)
	if src != "off" || lim != 1<<40 || debug.SetMemoryLimit(-1) != 1<<40 {
		t.Fatalf("off: %v (%s), runtime limit %d: off must leave the runtime's limit alone and report it", lim, src, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(1<<63 - 1)
	if lim, src = c.ApplyMemoryLimit(MemoryLoad{Writers: 1}, noEnv); src != "off" || lim != 0 {
		t.Fatalf("off with no limit in the process: %v (%s), want 0 (none)", lim, src)
	}
}

// The memory_limit key's doc says what auto computes: the bound with its
// runtime headroom, less unmanagedMemory, and the defaults' limit.
func TestMemoryLimitDocMatchesCode(t *testing.T) {
	w, _ := reflect.TypeFor[Config]().FieldByName("Write")
	f, ok := w.Type.FieldByName("MemoryLimit")
	if !ok || f.Tag.Get("yaml") != "memory_limit" {
		t.Fatalf("Config.Write has no MemoryLimit field tagged memory_limit")
	}
	doc := f.Tag.Get("doc")
	auto := DefaultConfig().SoftMemoryLimit(MemoryLoad{Writers: 1})
	for _, want := range []string{
		fmt.Sprintf("+ %d MiB", runtimeHeadroom/MiB),
		fmt.Sprintf("less %d MiB", unmanagedMemory/MiB),
		fmt.Sprintf("%d MiB with the defaults and one writer", auto/MiB),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("memory_limit's doc does not say %q:\n%s", want, doc)
		}
	}
}
