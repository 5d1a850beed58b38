package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"

	"github.com/durashuffle/durashuffle/internal/entry"
)

// Format versions. A reader refuses a manifest whose major version it
// does not know; minor versions only add fields. Version 2 made the
// worker manifest a binary container and split the sealed stage into a
// small JSON manifest and a binary, partition-indexed index object (see
// doc.go); version 3 added the checksums every reader verifies (a CRC32C
// of each region of each metadata object), which a 2.x reader would
// ignore, so stages of versions 1 and 2 are refused with ErrVersion.
const (
	formatMajor   = 3
	FormatVersion = "3.1"
	KindWorker    = "worker"
	kindStage     = "stage"
)

// Sentinel errors of the manifest layer.
var (
	// ErrAlreadyCommitted: another attempt of the worker committed first.
	ErrAlreadyCommitted = errors.New("another attempt already committed this worker's output")
	// ErrCommitUnknown: a worker or stage manifest's put may or may not
	// have stored it, and reading it back failed. What it names (the
	// attempt's objects, the seal's index) must stay: gc removes them if
	// the manifest never lands.
	ErrCommitUnknown = errors.New("commit outcome unknown")
	// ErrStageNotFound: the stage has neither a stage nor a worker manifest.
	ErrStageNotFound = errors.New("stage not found")
	// ErrMissingWorkers: seal was asked for workers that have not committed.
	ErrMissingWorkers = errors.New("workers have not committed")
	// ErrSealConflict: the stage is already sealed with other workers or
	// attempts.
	ErrSealConflict = errors.New("stage already sealed differently")
	// ErrVersion: the manifest's major version is unknown to this reader.
	ErrVersion = errors.New("unsupported manifest format version")
	// ErrCorrupt: the manifest is not valid JSON or is inconsistent.
	ErrCorrupt = errors.New("corrupt manifest")
)

// Object is one data object of a worker attempt (entry.Object: the
// chunker, below the manifest, produces it).
type Object = entry.Object

// Frame is one frame's index entry: where it is and what it holds. On
// disk it is a 48-byte little-endian record (see EntrySize). It is
// entry.Frame: the chunker, below the manifest, produces it.
type Frame = entry.Frame

// Totals sum a manifest.
type Totals struct {
	Rows         int64 `json:"rows"`
	BytesLogical int64 `json:"bytes_logical"`
	BytesStored  int64 `json:"bytes_stored"`
	Frames       int   `json:"frames"`
	Objects      int   `json:"objects"`
	Parts        int   `json:"parts"`
}

// Worker is one worker's committed output: the JSON header of its
// worker manifest, and its frames. A stored worker manifest holds its
// frames sorted by partition, in write order within a partition (Commit
// sorts them so); a sealed stage's Workers carry headers only, no
// Frames. In a stage manifest the fields the stage already says (format
// version, kind, query, stage, schema, partitions) are left out and
// filled in on decode.
type Worker struct {
	FormatVersion string `json:"format_version,omitempty"`
	Kind          string `json:"kind,omitempty"`
	Query         string `json:"query,omitempty"`
	Stage         int    `json:"stage,omitempty"`
	Worker        string `json:"worker"`
	Attempt       string `json:"attempt"`
	Schema        []byte `json:"schema,omitempty"` // Arrow IPC schema message stream, base64 in JSON
	Compression   string `json:"compression"`
	// Codecs counts frames by the codec in their headers (lz4, zstd,
	// none): with compression auto, the mix the writer chose. Readers
	// decode each frame by its header, whatever this says.
	Codecs        map[string]int `json:"codecs,omitempty"`
	Partitions    int            `json:"partitions,omitempty"`
	ChunkSize     int64          `json:"chunk_size"`
	Results       bool           `json:"results,omitempty"` // a query's final results stage
	Objects       []Object       `json:"objects"`
	Frames        []Frame        `json:"-"` // binary entries, after the header
	Totals        Totals         `json:"totals"`
	WriterVersion string         `json:"writer_version"`
	WrittenAt     time.Time      `json:"written_at"`
	// Peer is the Flight address (advertise_addr) of the sidecar that
	// committed the worker and kept its frames in memory at commit time;
	// readers may fetch the frames from it, verified against the same
	// CRC32Cs, before falling back to the store. Empty: read the store.
	// Added in format 2.1; older readers ignore it.
	Peer string `json:"peer,omitempty"`
	// GroupSHA256, in the manifest of a combine task of a plan made
	// while the stage is written (package combine), is the hex SHA-256
	// of the group record its inputs came from: the combined seal
	// requires it to be the record it checks against the first level.
	GroupSHA256 string `json:"group_sha256,omitempty"`
	// Checksums of the stored worker manifest (format 3), written by
	// Encode and verified by every decoder: the CRC32C of the offset
	// table, and of each block of EntryBlock entries (LE u32 each,
	// base64 in JSON). Not kept in a stage manifest.
	TableCRC32C uint32 `json:"table_crc32c,omitempty"`
	EntryBlock  int    `json:"entry_block,omitempty"`
	EntryCRCs   []byte `json:"entry_crcs,omitempty"`
	// Encryption, when set, says every frame of the worker is sealed
	// (docs/format.md, "Encrypted frames") and under which key: a reader
	// without that key refuses the stage rather than read it. Added in
	// format 3.1.
	Encryption *Encryption `json:"encryption,omitempty"`
}

// Encryption describes the key a worker's frames are sealed with.
type Encryption struct {
	// Cipher is "aes-256-gcm".
	Cipher string `json:"cipher"`
	// Source is where the stage key comes from: "key" (a root key the
	// program or a key file holds) or "kms" (a data key generated by
	// KMS, stored wrapped beside the query: {query}/key.json).
	Source string `json:"source"`
	// KMSKeyID is the KMS key that wraps the query's data key (source
	// kms).
	KMSKeyID string `json:"kms_key_id,omitempty"`
	// Fingerprint names the stage key without revealing it (HMAC-SHA256
	// of a fixed label under the key, 16 bytes in hex).
	Fingerprint string `json:"fingerprint"`
	// Writers, in a combined level's worker, are the first-level writers
	// whose sealed frames its object holds: a frame is opened as the
	// worker and attempt of the writer its nonce names. Empty in a
	// first-level worker, whose frames are its own.
	Writers []SealedBy `json:"writers,omitempty"`
}

// SealedBy is one writer of a stage's first level: its write ID (in its
// data keys and in its frames' nonces), worker and attempt.
type SealedBy struct {
	Write   string `json:"write"`
	Worker  string `json:"worker"`
	Attempt string `json:"attempt"`
}

// Encrypted returns the encryption of the stage's workers (they agree:
// Seal refuses a stage whose workers do not), or nil when its frames
// are not sealed.
func (s *Stage) Encrypted() *Encryption {
	if len(s.Workers) == 0 {
		return nil
	}
	return s.Workers[0].Encryption
}

// Stage is a stage: its workers (headers, sorted by worker ID) and, once
// sealed, a reference to its index object. Frames are not held: Frames
// and Summary fetch them from the index by partition range. A stage
// assembled from worker manifests (not sealed) carries its workers'
// Frames in memory instead.
type Stage struct {
	FormatVersion string    `json:"format_version"`
	Kind          string    `json:"kind"`
	Query         string    `json:"query"`
	Stage         int       `json:"stage"`
	Partitions    int       `json:"partitions"`
	Schema        []byte    `json:"schema"`
	Results       bool      `json:"results,omitempty"`
	Workers       []Worker  `json:"workers"`
	Totals        Totals    `json:"totals"`
	SealedAt      time.Time `json:"sealed_at"`
	Index         *Index    `json:"index,omitempty"`
	// Combines, in the manifest of a second level of the stage (a
	// combined level, package combine), names the level it was made
	// from; absent in a first level. Readers ignore it.
	Combines *Origin `json:"combines,omitempty"`
	// Sealed is false for a stage assembled from worker manifests because
	// no stage manifest exists yet. Not stored.
	Sealed bool `json:"-"`
	// encoded is the size of the stored manifest, for cache accounting.
	encoded int
}

// Sum computes totals from objects and frames.
func (w *Worker) Sum() Totals {
	t := Totals{Frames: len(w.Frames), Objects: len(w.Objects)}
	for _, f := range w.Frames {
		t.Rows += f.Rows
		t.BytesLogical += f.Bytes
	}
	for _, o := range w.Objects {
		t.BytesStored += o.Size
		t.Parts += o.Parts
	}
	return t
}

// Encode returns the JSON of a stage manifest. Its workers are written
// without the fields the stage says for all of them.
func (s *Stage) Encode() ([]byte, error) {
	c := *s
	c.Workers = make([]Worker, len(s.Workers))
	for i, w := range s.Workers {
		w.FormatVersion, w.Kind, w.Query, w.Stage, w.Schema, w.Partitions, w.Frames = "", "", "", 0, nil, 0, nil
		w.TableCRC32C, w.EntryBlock, w.EntryCRCs = 0, 0, nil
		c.Workers[i] = w
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	return appendStageCRC(b), nil
}

// stageTrailer is how a stage manifest ends: its checksum as the last
// member of the JSON object, `,"crc32c":"` 8 lower-case hex digits `"}`.
// The CRC32C covers the manifest with that member removed: every byte
// before the trailer, then "}".
const (
	stageTrailerHead = `,"crc32c":"`
	stageTrailerLen  = len(stageTrailerHead) + 8 + 2
)

// appendStageCRC replaces the closing brace of the JSON object b with the
// checksum member and the brace.
func appendStageCRC(b []byte) []byte {
	body := b[:len(b)-1]
	c := crc32.Update(crc32c(body), castagnoli, []byte("}"))
	return fmt.Appendf(body, "%s%08x\"}", stageTrailerHead, c)
}

// verifyStageCRC checks a stage manifest's trailer and returns the JSON
// without it. A manifest without the trailer is refused by its version
// when it states one other than 3.x (ErrVersion), as corrupt otherwise.
func verifyStageCRC(what string, b []byte) ([]byte, error) {
	n := len(b) - stageTrailerLen
	if n < 1 || string(b[n:n+len(stageTrailerHead)]) != stageTrailerHead || b[len(b)-2] != '"' || b[len(b)-1] != '}' {
		var probe struct {
			FormatVersion string `json:"format_version"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			return nil, fmt.Errorf("%w: %s is not JSON (%v), nor does it end with its checksum (%s<8 hex digits>\"})", ErrCorrupt, what, err, stageTrailerHead)
		}
		if probe.FormatVersion != "" {
			if err := checkVersion(what, probe.FormatVersion); err != nil {
				return nil, err
			}
		}
		return nil, fmt.Errorf("%w: %s (%d bytes) does not end with its checksum (%s<8 hex digits>\"})", ErrCorrupt, what, len(b), stageTrailerHead)
	}
	hex := b[n+len(stageTrailerHead) : len(b)-2]
	want, err := strconv.ParseUint(string(hex), 16, 32)
	if err != nil || len(hex) != 8 {
		return nil, fmt.Errorf("%w: %s ends with checksum %q, not 8 hex digits", ErrCorrupt, what, hex)
	}
	body := append(b[:n:n], '}')
	if got := crc32c(body); got != uint32(want) {
		return nil, crcMismatch(what, "body before the checksum member", 0, int64(n), got, uint32(want))
	}
	return body, nil
}

// MaxManifestBytes bounds what a reader accepts as a manifest: a worker
// manifest, whole, or a stage manifest. The index object may be larger:
// it is read by range, and each read allocates in proportion to the
// bytes that arrive.
const MaxManifestBytes = 512 << 20

// MaxPartitions bounds a stage's partition count, for writers
// (durashuffle.MaxPartitions is this one) and manifests: readers and
// inspect allocate per partition, so a manifest claiming 2^40 partitions
// must fail to decode rather than ask for terabytes.
const MaxPartitions = 1 << 20

func checkVersion(what, v string) error {
	majorStr, _, _ := strings.Cut(v, ".")
	major, err := strconv.Atoi(majorStr)
	if err != nil {
		return fmt.Errorf("%w: %s has format_version %q, want %d.x", ErrCorrupt, what, v, formatMajor)
	}
	if major != formatMajor {
		return fmt.Errorf("%w: %s has format_version %q; this reader understands %d.x", ErrVersion, what, v, formatMajor)
	}
	return nil
}

// decodeVersioned checks the format version before decoding b into v, so
// a manifest of an unknown major version is refused as such rather than
// misread.
func decodeVersioned(what string, b []byte, v any) error {
	var probe struct {
		FormatVersion string `json:"format_version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return fmt.Errorf("%w: %s is not JSON: %v", ErrCorrupt, what, err)
	}
	if err := checkVersion(what, probe.FormatVersion); err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, what, err)
	}
	return nil
}

// DecodeStage parses and checks a stage manifest; what names it in errors.
func DecodeStage(what string, stored []byte) (*Stage, error) {
	b, err := verifyStageCRC(what, stored)
	if err != nil {
		return nil, err
	}
	var s Stage
	if err := decodeVersioned(what, b, &s); err != nil {
		return nil, err
	}
	if s.Kind != kindStage {
		return nil, fmt.Errorf("%w: %s has kind %q, want %q", ErrCorrupt, what, s.Kind, kindStage)
	}
	if s.Partitions < 1 || s.Partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: %s has %d partitions, want 1 to %d", ErrCorrupt, what, s.Partitions, MaxPartitions)
	}
	for i := range s.Workers {
		w := &s.Workers[i]
		w.FormatVersion, w.Kind, w.Query, w.Stage, w.Schema, w.Partitions = s.FormatVersion, KindWorker, s.Query, s.Stage, s.Schema, s.Partitions
		if err := w.Check(fmt.Sprintf("%s worker %q", what, w.Worker)); err != nil {
			return nil, err
		}
		if w.Partitions != s.Partitions {
			return nil, fmt.Errorf("%w: %s: worker %q has %d partitions, stage has %d", ErrCorrupt, what, w.Worker, w.Partitions, s.Partitions)
		}
	}
	if s.Index == nil {
		return nil, fmt.Errorf("%w: %s has no index", ErrCorrupt, what)
	}
	if err := s.Index.check(what, &s); err != nil {
		return nil, err
	}
	s.Sealed = true
	s.encoded = len(stored)
	return &s, nil
}

// Check verifies that a worker manifest is consistent: every frame lies
// inside its object, partitions are in range, IDs are valid.
func (w *Worker) Check(what string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, what, fmt.Sprintf(format, args...))
	}
	if w.Kind != KindWorker {
		return bad("kind %q, want %q", w.Kind, KindWorker)
	}
	for _, id := range []struct{ kind, v string }{{"query", w.Query}, {"worker", w.Worker}, {"attempt", w.Attempt}} {
		if err := ValidateID(id.kind, id.v); err != nil {
			return bad("%v", err)
		}
	}
	if w.Partitions < 1 || w.Partitions > MaxPartitions {
		return bad("%d partitions, want 1 to %d", w.Partitions, MaxPartitions)
	}
	switch w.Compression {
	case "lz4", "zstd", "none", "auto":
	default:
		return bad("unknown compression %q", w.Compression)
	}
	for i, o := range w.Objects {
		if o.Size < 0 || !checkObjectKey(w.Query, w.Stage, o.Key) {
			return bad("object %d (%q) is invalid", i, o.Key)
		}
	}
	for i, f := range w.Frames {
		if f.Partition < 0 || f.Partition >= w.Partitions {
			return bad("frame %d has partition %d, outside [0, %d)", i, f.Partition, w.Partitions)
		}
		if f.Object < 0 || f.Object >= len(w.Objects) {
			return bad("frame %d names object %d of %d", i, f.Object, len(w.Objects))
		}
		o := w.Objects[f.Object]
		if f.Offset < 0 || f.Length <= 0 || f.Offset > o.Size-f.Length {
			return bad("frame %d [%d, +%d) lies outside object %s of %d bytes", i, f.Offset, f.Length, o.Key, o.Size)
		}
		if f.Rows < 0 || f.Bytes < 0 {
			return bad("frame %d has negative counts", i)
		}
	}
	return nil
}
