package durashuffle_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
)

// An engine that holds a key per cluster hands it to every client: each
// frame is sealed with AES-256-GCM before it leaves the process, under a
// key derived for its stage, and only a client with the same key reads
// the stage back.
func ExampleWithEncryptionKey() {
	ctx := context.Background()
	srv, err := embedded.Start("", "shuffle")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = "shuffle", srv.Endpoint(), true

	key := make([]byte, 32) // the engine's own key, never stored by durashuffle
	if _, err := rand.Read(key); err != nil {
		log.Fatal(err)
	}
	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(srv.Credentials()), durashuffle.WithEncryptionKey(key))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	schema := arrow.NewSchema([]arrow.Field{{Name: "name", Type: arrow.BinaryTypes.String}}, nil)
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 2, Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(`[{"name": "alice"}, {"name": "bob"}]`))
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Release()
	if err := w.Write(1, rec); err != nil {
		log.Fatal(err)
	}
	if _, err := w.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	s, err := c.OpenStage(ctx, "q", 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("encrypted:", s.Manifest().Encrypted().Cipher)
	rr, err := s.ReadPartitions(ctx, []int{1})
	if err != nil {
		log.Fatal(err)
	}
	for rr.Next() {
		fmt.Println("rows read with the key:", rr.RecordBatch().NumRows())
	}
	rr.Release()

	// A client without the key cannot open the stage.
	plain, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(srv.Credentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer plain.Close()
	_, err = plain.OpenStage(ctx, "q", 0)
	fmt.Println("without the key:", errors.Is(err, durashuffle.ErrKey))
	// Output:
	// encrypted: aes-256-gcm
	// rows read with the key: 2
	// without the key: true
}
