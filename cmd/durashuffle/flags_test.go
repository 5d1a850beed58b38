package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/spf13/pflag"
)

func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("chunk_size: 16MiB\nupload_concurrency: 3\nretry_base_delay: 250ms\nbucket: from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f := bindConfigFlags(fs, commandUses["serve"])
	if err := fs.Parse([]string{"--config", file, "--upload-concurrency", "5"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DURASHUFFLE_CHUNK_SIZE": "32MiB", "DURASHUFFLE_UPLOAD_CONCURRENCY": "4"}
	cfg, err := f.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Write.ChunkSize != 32*durashuffle.MiB {
		t.Errorf("chunk_size = %v, want env's 32MiB over file's 16MiB", cfg.Write.ChunkSize)
	}
	if cfg.Write.UploadConcurrency != 5 {
		t.Errorf("upload_concurrency = %d, want flag's 5 over env's 4", cfg.Write.UploadConcurrency)
	}
	if cfg.Store.RetryBaseDelay.D() != 250*time.Millisecond || cfg.Store.Bucket != "from-file" {
		t.Errorf("file values lost: %v %q", cfg.Store.RetryBaseDelay, cfg.Store.Bucket)
	}
	if cfg.Read.Ahead != 4 {
		t.Errorf("read_ahead = %d, want default 4", cfg.Read.Ahead)
	}
}

func TestMemoryLimitSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("memory_limit: 400MiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(env map[string]string, args ...string) durashuffle.MemoryLimit {
		t.Helper()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f := bindConfigFlags(fs, commandUses["serve"])
		if err := fs.Parse(append([]string{"--config", file}, args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.Load(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Write.MemoryLimit
	}
	if got := load(nil); got != durashuffle.MemoryLimit(400*durashuffle.MiB) {
		t.Errorf("file: %v", got)
	}
	if got := load(map[string]string{"DURASHUFFLE_MEMORY_LIMIT": "off"}); got != durashuffle.MemoryLimitOff {
		t.Errorf("env: %v", got)
	}
	if got := load(map[string]string{"DURASHUFFLE_MEMORY_LIMIT": "off"}, "--memory-limit", "auto"); got != durashuffle.MemoryLimitAuto {
		t.Errorf("flag: %v", got)
	}
}
