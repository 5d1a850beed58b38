package sidecar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestMetadataFlipsFlight flips one byte of a stage's metadata in the
// store before the sidecar first opens the stage: GetFlightInfo and
// ListFlights (which read the stage manifest and the index's summary, or
// an unsealed stage's worker manifests) and DoGet (which reads the
// index's entries) fail naming the damaged object and the byte range
// whose checksum did not match, on every backend.
func TestMetadataFlipsFlight(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			metadataFlipsFlight(t, b.Start(t))
		})
	}
}

func metadataFlipsFlight(t *testing.T, ep testenv.Endpoint) {
	e := newEnv(t, ep, envOptions{})
	ctx := context.Background()
	l := e.client.Layout()
	const partitions = 4
	write := func(query string, seal bool) {
		t.Helper()
		for w := range 2 {
			var bs []partBatch
			for b := range 4 {
				rec, _ := genBatch(fmt.Sprint(w), int32(b), 100, 16)
				bs = append(bs, partBatch{b % partitions, rec})
			}
			cmd := flightclient.PutCommand{Query: query, Stage: 0, Worker: flightclient.WorkerID(fmt.Sprint(w)), Partitions: partitions}
			if _, err := putWorker(ctx, e.sc, cmd, slices.Values(bs)); err != nil {
				t.Fatal(err)
			}
		}
		if seal {
			if _, err := e.sc.Seal(ctx, query, 0, 2); err != nil {
				t.Fatal(err)
			}
		}
	}
	get := func(key string) []byte {
		t.Helper()
		body, err := e.raw.GetRange(ctx, key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	flip := func(key string, at func(b []byte) int) {
		t.Helper()
		b := get(key)
		b[at(b)] ^= 0x01
		if err := e.raw.Put(ctx, key, b, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	info := func(query string) error {
		_, err := e.fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{query, "0"}})
		return err
	}
	list := func(query string) error {
		crit, _ := json.Marshal(flightclient.ListCriteria{Query: query})
		lf, err := e.fc.ListFlights(ctx, &flight.Criteria{Expression: crit})
		if err != nil {
			return err
		}
		for {
			if _, err := lf.Recv(); err == io.EOF {
				return fmt.Errorf("ListFlights of %s listed the stage", query)
			} else if err != nil {
				return err
			}
		}
	}
	doGet := func(query string) error {
		_, _, err := doGet(ctx, e.fc, map[string]any{"query": query, "stage": 0, "partitions": []int{0}})
		return err
	}
	want := func(what string, err error, key, region string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error, want one naming %s", what, key)
		}
		for _, s := range []string{"corrupt manifest", key, region, "bytes [", "has CRC32C"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("%s: %v, want it to name %q", what, err, s)
			}
		}
		t.Logf("%s: %v", what, err)
	}
	stageOf := func(query string) *manifest.Stage {
		m, err := manifest.LoadStageManifest(ctx, e.raw, l, query, 0)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	// The stage manifest's body.
	write("fl-stage", true)
	key := l.StageManifestKey("fl-stage", 0)
	flip(key, func(b []byte) int { return bytes.Index(b, []byte(`"first":"`)) + 10 })
	want("GetFlightInfo, stage manifest", info("fl-stage"), key, "body before the checksum member")
	want("ListFlights, stage manifest", list("fl-stage"), key, "body before the checksum member")

	// The index's summary.
	write("fl-summary", true)
	m := stageOf("fl-summary")
	key = l.ObjectKey("fl-summary", 0, m.Index.Key)
	flip(key, func([]byte) int { return int(m.Index.SummaryOffset) + 8 })
	want("GetFlightInfo, index summary", info("fl-summary"), "index "+key, "summary")
	want("ListFlights, index summary", list("fl-summary"), "index "+key, "summary")

	// The index's entries: a frame's offset.
	write("fl-entries", true)
	m = stageOf("fl-entries")
	key = l.ObjectKey("fl-entries", 0, m.Index.Key)
	flip(key, func([]byte) int { return int(m.Index.EntriesOffset) + 16 })
	want("DoGet, index entry", doGet("fl-entries"), "index "+key, "entries [")

	// An unsealed stage's worker manifest: its last entry.
	write("fl-worker", false)
	key = l.WorkerManifestKey("fl-worker", 0, "1")
	flip(key, func(b []byte) int { return len(b) - 1 })
	want("GetFlightInfo, worker manifest", info("fl-worker"), key, "entries [")
	want("ListFlights, worker manifest", list("fl-worker"), key, "entries [")
}
