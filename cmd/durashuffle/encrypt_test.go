package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/store"
)

// demoWindows returns every 16-byte window of the demo's string values
// of at least 16 bytes (comments, shipping instructions) of rows [0, n).
func demoWindows(n int64) map[string]bool {
	w := make(map[string]bool)
	g := demo.Generator{Seed: 1}
	var r demo.Row
	for i := range n {
		g.Row(i, &r)
		for _, v := range []string{r.Comment, r.ShipInstruct} {
			for off := 0; off+16 <= len(v); off++ {
				w[v[off:off+16]] = true
			}
		}
	}
	return w
}

// plaintextStored counts the 16-byte windows of every object under
// prefix that are windows of plain.
func plaintextStored(t *testing.T, st store.Store, prefix string, plain map[string]bool) (hits, objects int) {
	t.Helper()
	ctx := context.Background()
	objs, _, err := st.List(ctx, prefix, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		r, err := st.GetRange(ctx, o.Key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+16 <= len(b); i++ {
			if plain[string(b[i:i+16])] {
				hits++
			}
		}
	}
	return hits, len(objs)
}

// TestDemoEncrypted: demo --encrypt, spilling, stores no 16 bytes of any
// of its string values in any object (the same demo without it does);
// `read` of the stage needs the key, and says which stage wants one.
func TestDemoEncrypted(t *testing.T) {
	const rows = 30000
	plain := demoWindows(rows)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	hexKey := hex.EncodeToString(key)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			tg := newTarget(t, b)
			st, _ := tg.ep.NewStore(t)
			for _, tc := range []struct {
				query string
				flags []string
			}{
				{"demo-sealed", []string{"--encrypt"}}, // a key of its own
				{"demo-keyed", []string{"--encrypt"}},
				{"demo-plain", nil},
			} {
				args := append([]string{"demo", "--json", "--query", tc.query, "--rows", "30000", "--workers", "2", "--partitions", "8",
					"--spill", "on", "--coalesce-budget", "1MiB", "--frame-target-bytes", "64KiB", "--spill-dir", t.TempDir(), "--log-level", "warn"}, tc.flags...)
				var s demoSummary
				run := tg
				if tc.query == "demo-keyed" {
					run.env = append(append([]string(nil), tg.env...), "DURASHUFFLE_ENCRYPTION_KEY="+hexKey)
				}
				run.run(t, nil, args...).must(t).decode(t, &s)
				if !s.Verified || s.Encrypted != (tc.flags != nil) {
					t.Fatalf("%s: verified %v, encrypted %v", tc.query, s.Verified, s.Encrypted)
				}
				hits, objs := plaintextStored(t, st, "durashuffle/"+tc.query+"/", plain)
				t.Logf("%s: %d objects, %d windows of plaintext", tc.query, objs, hits)
				if (tc.flags != nil) != (hits == 0) {
					t.Fatalf("%s (flags %v): %d windows of the demo's values in %d stored objects", tc.query, tc.flags, hits, objs)
				}
			}
			r := tg.run(t, nil, "read", "--query", "demo-keyed", "--partition", "3", "--format", "jsonl", "--encryption-key", hexKey)
			if r.code != 0 || strings.Count(r.stdout, "\n") == 0 {
				t.Fatalf("read with the key: exit %d, %d lines\n%s", r.code, strings.Count(r.stdout, "\n"), r.stderr)
			}
			r = tg.run(t, nil, "read", "--query", "demo-keyed", "--partition", "3", "--format", "jsonl")
			if r.code == 0 || !strings.Contains(r.stderr, "demo-keyed stage 0 is encrypted") || r.stdout != "" {
				t.Fatalf("read without the key: exit %d, stdout %d bytes\n%s", r.code, len(r.stdout), r.stderr)
			}
			wrong := strings.Repeat("ab", 32)
			r = tg.run(t, nil, "read", "--query", "demo-keyed", "--partition", "3", "--format", "jsonl", "--encryption-key", wrong)
			if r.code == 0 || !strings.Contains(r.stderr, "wrong key") || strings.Contains(r.stderr, wrong) || r.stdout != "" {
				t.Fatalf("read with a wrong key: exit %d, stdout %d bytes\n%s", r.code, len(r.stdout), r.stderr)
			}
		})
	}
}
