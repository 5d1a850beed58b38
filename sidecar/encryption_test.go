package sidecar_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

func newKey(t *testing.T) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestPerCallKey: over TLS, a DoPut carrying a key commits a stage whose
// frames are sealed under it, a DoGet with the key reads it back (from
// the sidecar's memory store, then from the store once released), and
// one with no key or another key is refused with PermissionDenied
// naming the stage; over plaintext gRPC a call carrying a key is
// refused before anything is written.
func TestPerCallKey(t *testing.T) {
	ctx := context.Background()
	p := testenv.NewPKI(t)
	e := newEnv(t, testenv.Embedded(t), envOptions{cfg: func(c *durashuffle.Config) {
		c.Sidecar.TLSCertFile, c.Sidecar.TLSKeyFile = p.CertFile, p.KeyFile
		c.Sidecar.MemoryStoreBytes = 64 * durashuffle.MiB
	}})
	key := newKey(t)
	sc, err := flightclient.Dial(e.addr, flightclient.Options{TLS: &tls.Config{RootCAs: p.Roots}, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	rec, want := genBatch("k", 0, 2000, 64)
	res, err := putWorker(ctx, sc, flightclient.PutCommand{Query: "q-key", Worker: "0", Partitions: 2}, slices.Values([]partBatch{{1, rec}}))
	if err != nil || !res.Committed {
		t.Fatalf("DoPut with a key over TLS: %+v %v", res, err)
	}
	m, err := manifest.LoadWorker(ctx, e.client.Store(), e.client.Layout(), "q-key", 0, "0")
	if err != nil || m.Encryption == nil || m.Encryption.Source != "key" {
		t.Fatalf("worker manifest encryption %+v (%v), want sealed under the call's key", m.Encryption, err)
	}
	withKey := func(k []byte) context.Context {
		return metadata.AppendToOutgoingContext(ctx, flightclient.KeyHeader, hex.EncodeToString(k))
	}
	tc := e.dialWith(credentials.NewTLS(&tls.Config{RootCAs: p.Roots}))
	ticket := map[string]any{"query": "q-key", "stage": 0, "partition": 1}
	_, got, err := doGet(withKey(key), tc, ticket)
	if err != nil || len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
		t.Fatalf("DoGet with the key: %d rows, want %d: %v", len(got), len(want), err)
	}
	_, _, err = doGet(ctx, tc, ticket)
	wantCode(t, err, codes.PermissionDenied, "q-key stage 0 is encrypted", "no key was given")
	_, _, err = doGet(withKey(newKey(t)), tc, ticket)
	wantCode(t, err, codes.PermissionDenied, "q-key stage 0", "wrong key")
	// The right key again, after the wrong one: the stage it cached is
	// still its own; and once the memory store let go of the frames,
	// from the store.
	if _, _, _, held := e.client.MemoryHeld("q-key", 0); len(held) != 1 {
		t.Fatalf("the memory store holds %d workers of q-key, want 1", len(held))
	}
	if _, got, err = doGet(withKey(key), tc, ticket); err != nil || len(got) != len(want) {
		t.Fatalf("DoGet with the key after a wrong one: %d rows, %v", len(got), err)
	}
	e.client.MemoryRelease("q-key", -1)
	if _, got, err = doGet(withKey(key), tc, ticket); err != nil || len(got) != len(want) {
		t.Fatalf("DoGet with the key from the store: %d rows, %v", len(got), err)
	}

	plain := newEnv(t, testenv.Embedded(t), envOptions{})
	if _, err := flightclient.Dial(plain.addr, flightclient.Options{Key: key}); err == nil {
		t.Fatalf("flightclient.Dial took a key without TLS")
	}
	rec2, _ := genBatch("k", 1, 10, 8)
	_, err = putWorker(withKey(key), plain.sc, flightclient.PutCommand{Query: "q-plain", Worker: "0", Partitions: 1}, slices.Values([]partBatch{{0, rec2}}))
	wantCode(t, err, codes.FailedPrecondition, "plaintext gRPC", "tls_cert_file")
	plain.nothingLeft("q-plain", 0, "0")
}
