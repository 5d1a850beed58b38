package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t, b)
			const query = "demo-test"
			const chunk = 5 << 20
			var s demoSummary
			// No hedged uploads: a slow machine must not add UploadParts
			// to the exact request accounting below.
			tg.run(t, nil, "demo", "--json", "--query", query, "--rows", "200000", "--workers", "2",
				"--partitions", "16", "--chunk-size", "5MiB", "--hedge-factor", "0", "--log-level", "warn").must(t).decode(t, &s)

			if !s.Committed || !s.Sealed || !s.Verified {
				t.Fatalf("committed %v sealed %v verified %v: %+v", s.Committed, s.Sealed, s.Verified, s)
			}
			if s.RowsWritten != 200000 || s.RowsRead != s.RowsWritten || s.PartitionsVerified != 16 {
				t.Fatalf("rows written %d, read %d, partitions verified %d", s.RowsWritten, s.RowsRead, s.PartitionsVerified)
			}
			if s.Workers != 2 || s.Partitions != 16 || s.ChunkSize != chunk || s.Embedded {
				t.Fatalf("summary does not echo the run: %+v", s)
			}
			if s.BytesLogical <= s.BytesStored || s.CompressRatio <= 1 || s.WriteSeconds <= 0 || s.ReadSeconds <= 0 {
				t.Fatalf("sizes or times implausible: logical %d stored %d ratio %v write %vs read %vs",
					s.BytesLogical, s.BytesStored, s.CompressRatio, s.WriteSeconds, s.ReadSeconds)
			}
			if s.PeakBuffered < 1 || s.PeakBuffered > int64(s.MaxBuffered) {
				t.Fatalf("peak buffered chunks %d outside [1, %d]", s.PeakBuffered, s.MaxBuffered)
			}

			// PUT-class requests: puts, creates, parts and completes, per
			// GiB stored.
			puts := s.Requests["PutObject"] + s.Requests["CreateMultipartUpload"] + s.Requests["UploadPart"] + s.Requests["CompleteMultipartUpload"]
			if perGiB := math.Round(float64(puts)/(float64(s.BytesStored)/(1<<30))*100) / 100; s.PutRequests != puts || s.PutPerGiB != perGiB || puts == 0 {
				t.Fatalf("put_requests %d, put_requests_per_gib %v; the requests %v of %d bytes stored make %d, %v", s.PutRequests, s.PutPerGiB, s.Requests, s.BytesStored, puts, perGiB)
			}

			// Parts: what the store holds, ceil(size / chunk) per object.
			st, _ := tg.ep.NewStore(t)
			ctx := context.Background()
			objs, _, err := st.List(ctx, "durashuffle/"+query+"/", "")
			if err != nil {
				t.Fatal(err)
			}
			var data, parts int
			var stored int64
			for _, o := range objs {
				if strings.HasSuffix(o.Key, ".arrows") {
					data++
					parts += int((o.Size + chunk - 1) / chunk)
					stored += o.Size
				}
			}
			if data != s.Objects || parts != s.Parts || stored != s.BytesStored {
				t.Fatalf("store holds %d data objects, %d bytes, %d parts by size; summary says %d objects, %d bytes, %d parts",
					data, stored, parts, s.Objects, s.BytesStored, s.Parts)
			}
			if s.Parts < 2*s.Objects {
				t.Fatalf("%d parts for %d objects: the data set should need multipart uploads", s.Parts, s.Objects)
			}
			// Every part is one UploadPart, or one PutObject for an object
			// that fit a chunk; the other PutObjects are worker manifests.
			// Retried requests are counted twice.
			var retried int64
			for opReason, n := range s.Retries {
				if strings.HasPrefix(opReason, "UploadPart/") || strings.HasPrefix(opReason, "PutObject/") {
					retried += n
				}
			}
			// Over HTTPS an object's last part may go twice: streamed
			// while its chunk filled, cut off when the chunk ended short,
			// then whole (parts_resent); at most once per object.
			if s.PartsResent > int64(s.Objects) {
				t.Fatalf("%d parts resent for %d objects", s.PartsResent, s.Objects)
			}
			if got := s.Requests["UploadPart"] + s.Requests["PutObject"] - int64(s.Workers) - retried; got < int64(s.Parts) || got > int64(s.Parts)+s.PartsResent {
				t.Fatalf("write requests %v do not add up to %d parts", s.Requests, s.Parts)
			}
			if s.Requests["CreateMultipartUpload"] != s.Requests["CompleteMultipartUpload"] || s.Requests["AbortMultipartUpload"] != 0 {
				t.Fatalf("write requests %v: uploads created, completed and aborted do not match", s.Requests)
			}

			// The read phase: one manifest GET, one ranged GET of the index
			// per partition read, ranged data GETs, nothing else.
			if len(s.ReadRequests) != 1 || s.ReadRequests["GetObject"] != s.ReadRanges+1+int64(s.Partitions) || s.ReadRanges < 16 {
				t.Fatalf("read requests %v with %d ranged GETs: want only GetObject, one for the manifest and one of the index per partition (%d)", s.ReadRequests, s.ReadRanges, s.Partitions)
			}
			for _, op := range []string{"HeadObject", "ListObjectsV2"} {
				if s.ReadRequests[op] != 0 || s.Requests[op] != 0 {
					t.Fatalf("%s during write (%v) or read (%v)", op, s.Requests, s.ReadRequests)
				}
			}

			ups, err := st.ListUploads(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(ups) != 0 || s.OpenUploads != 0 {
				t.Fatalf("multipart uploads left open: %v (summary: %d)", ups, s.OpenUploads)
			}

			t.Run("inspect", func(t *testing.T) {
				var in inspectOutput
				tg.run(t, nil, "inspect", "--json", "--query", query, "--stage", "0").must(t).decode(t, &in)
				if !in.Sealed || in.Partitions != 16 || in.Totals.Rows != 200000 || len(in.Workers) != 2 ||
					len(in.PartitionList) != 16 || in.CompressRatio != s.CompressRatio || len(in.Schema) != 16 {
					t.Fatalf("inspect: %+v", in)
				}
				var rows, bytes int64
				for _, p := range in.PartitionList {
					rows += p.Rows
					bytes += p.BytesStored
					if p.Rows == 0 || p.Frames == 0 {
						t.Fatalf("partition %d is empty: %+v", p.Partition, p)
					}
				}
				if rows != 200000 || bytes > s.BytesStored || bytes < s.BytesStored*9/10 {
					t.Fatalf("partitions hold %d rows and %d stored bytes of %d", rows, bytes, s.BytesStored)
				}
				var objParts int
				for _, w := range in.Workers {
					if w.Attempt == "" || len(w.Objects) == 0 {
						t.Fatalf("worker %+v", w)
					}
					for _, o := range w.Objects {
						if !strings.HasPrefix(o.Key, "durashuffle/"+query+"/stage-0/worker-"+w.Worker+"/attempt-"+w.Attempt+"/") {
							t.Fatalf("object key %s", o.Key)
						}
						objParts += o.Parts
					}
				}
				if objParts != s.Parts || in.Skew.MaxOverAvg < 1 || in.Skew.MaxStored < in.Skew.MinStored {
					t.Fatalf("inspect parts %d (want %d), skew %+v", objParts, s.Parts, in.Skew)
				}
				// Two GETs: the stage is sealed (its manifest, then its
				// index's partition summary, no entries).
				if len(in.Requests) != 1 || in.Requests["GetObject"] != 2 {
					t.Fatalf("inspect made requests %v, want two GetObject", in.Requests)
				}

				human := tg.run(t, nil, "inspect", "--query", query, "--stage", "0").must(t).stdout
				for _, want := range []string{"sealed", "compression ratio", "stored bytes per partition", "#", "attempt-"} {
					if !strings.Contains(human, want) {
						t.Fatalf("inspect output lacks %q:\n%s", want, human)
					}
				}
			})

			t.Run("ls", func(t *testing.T) {
				var ls lsOutput
				tg.run(t, nil, "ls", "--json").must(t).decode(t, &ls)
				if len(ls.Queries) != 1 || ls.Queries[0].Query != query || len(ls.Queries[0].Stages) != 1 ||
					ls.Queries[0].Stages[0] != (lsStage{Stage: 0, Sealed: true, Workers: 2}) {
					t.Fatalf("ls: %+v", ls)
				}
				out := tg.run(t, nil, "ls", "--query", query).must(t).stdout
				if !strings.Contains(out, "QUERY") || !strings.Contains(out, query) || !strings.Contains(out, "yes") {
					t.Fatalf("ls output:\n%s", out)
				}
			})
		})
	}
}

// TestDemoHumanEmbedded runs the demo the way a user does first: no
// endpoint, so on the embedded server, with the human summary.
func TestDemoHumanEmbedded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := cli(t, nil, nil, "demo", "--rows", "20000", "--workers", "3", "--partitions", "8", "--data-dir", dir).must(t)
	for _, want := range []string{"embedded S3 server", "20000 rows", "requests:", "verified"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("summary lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "level=INFO") {
		t.Fatalf("no logs on stderr:\n%s", r.stderr)
	}
	// --data-dir is kept, with the objects in it.
	var files int
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return err
	})
	if err != nil || files < 4 {
		t.Fatalf("data dir holds %d files (err %v), want the demo's objects", files, err)
	}
}
