package flightclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/durashuffle/durashuffle/internal/held"
)

// Action types of DoAction.
const (
	// ActionSealStage merges a stage's worker manifests into its stage
	// manifest.
	ActionSealStage = "seal-stage"
	// ActionDeleteQuery deletes every object of a query.
	ActionDeleteQuery = "delete-query"
	// ActionGC deletes uncommitted data and expired results stages.
	ActionGC = "gc"
	// ActionRelease drops a stage's workers from a sidecar's memory store.
	ActionRelease = "release"
	// ActionHeld lists the workers a sidecar's memory store holds.
	ActionHeld = "held"
	// ActionFetch is the peer protocol: its body is a FetchRequest, its
	// answer a stream of results whose bodies, concatenated, are exactly
	// the requested bytes, each at most MaxResultBytes. A sidecar that does
	// not hold them answers NotFound; it never reads the object store on a
	// peer's behalf.
	ActionFetch = "fetch"
	// ActionCombine plans, runs and seals the combining of a sealed
	// stage's objects into fewer, larger ones (a CombineRequest): all of
	// it, one task, only the seal, or only the plan.
	ActionCombine = "combine"
)

// Limits of the peer protocol.
const (
	// MaxResultBytes bounds one result of a fetch.
	MaxResultBytes = 1 << 20
	// MaxFetchBytes bounds the length of one fetch.
	MaxFetchBytes = 1 << 30
)

// PutCommand is DoPut's descriptor: FlightDescriptor CMD holding this
// object as JSON. The sidecar rejects unknown fields, so a misspelt key
// fails loudly instead of defaulting; query, stage, worker and partitions
// are required.
type PutCommand struct {
	Query      string   `json:"query"`
	Stage      int      `json:"stage"`
	Worker     WorkerID `json:"worker"`
	Attempt    string   `json:"attempt,omitempty"` // empty: a fresh attempt ID
	Partitions int      `json:"partitions"`
	// Results marks a query's final results stage (kept for
	// results_retention rather than until the query is deleted).
	Results bool `json:"results,omitempty"`
}

// WorkerID is a worker ID in JSON: a string, or a non-negative integer
// that means its decimal string (7 and "7" are the same worker).
type WorkerID string

// UnmarshalJSON implements json.Unmarshaler.
func (w *WorkerID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*w = WorkerID(s)
		return nil
	}
	n, err := strconv.ParseUint(string(b), 10, 63)
	if err != nil {
		return fmt.Errorf("worker must be a string or a non-negative integer, got %s", b)
	}
	*w = WorkerID(strconv.FormatUint(n, 10))
	return nil
}

// PutResult is the JSON app_metadata of the PutResult a committed DoPut
// sends before it ends.
type PutResult struct {
	Committed    bool   `json:"committed"`
	Query        string `json:"query"`
	Stage        int    `json:"stage"`
	Worker       string `json:"worker"`
	Attempt      string `json:"attempt"`
	Partitions   int    `json:"partitions"`
	Batches      int64  `json:"batches"`
	Rows         int64  `json:"rows"`
	BytesLogical int64  `json:"bytes_logical"`
	BytesStored  int64  `json:"bytes_stored"`
	Objects      int    `json:"objects"`
	Frames       int    `json:"frames"`
	Parts        int    `json:"parts"`
}

// BatchMetadata is the app_metadata of every FlightData of a DoPut that
// carries a record batch, and of every batch a DoGet sends.
type BatchMetadata struct {
	Partition *json.Number `json:"partition"`
}

// batchAppMetadata is the app_metadata of a batch of partition p.
func batchAppMetadata(p int) []byte {
	n := json.Number(strconv.Itoa(p))
	b, _ := json.Marshal(BatchMetadata{Partition: &n})
	return b
}

// CommitMessage is the app_metadata of the last FlightData of a DoPut:
// a message with no batch that asks the sidecar to commit. Counts are what
// the client sent; the sidecar commits only when both match what it
// received, so a stream cut short (a client that half-closes and then
// cancels) can never commit a truncated output.
type CommitMessage struct {
	Commit *CommitCounts `json:"commit"`
}

// CommitCounts are the batches and rows a client sent in its DoPut.
type CommitCounts struct {
	Batches *int64 `json:"batches"`
	Rows    *int64 `json:"rows"`
}

// commitMetadata is the app_metadata of the commit message for a DoPut
// that sent batches record batches holding rows rows in all.
func commitMetadata(batches, rows int64) []byte {
	b, _ := json.Marshal(CommitMessage{Commit: &CommitCounts{Batches: &batches, Rows: &rows}})
	return b
}

// Ticket is DoGet's ticket, as JSON: one partition, a list of them, or
// none (no key, or an empty list) for every partition of the stage.
// query and stage are required.
type Ticket struct {
	Query      string `json:"query"`
	Stage      int    `json:"stage"`
	Partition  *int   `json:"partition,omitempty"`
	Partitions []int  `json:"partitions,omitempty"`
	// Order is "partition" (the default: partitions ascending, then
	// workers, then write order) or "storage": the batches as they are
	// stored, fetched in GETs of read_range_bytes, each batch's
	// app_metadata naming its partition. A storage-order ticket with no
	// partition reads the whole stage.
	Order string `json:"order,omitempty"`
}

// Ticket orders.
const (
	OrderPartition = "partition"
	OrderStorage   = "storage"
)

// StageRef names a stage: GetFlightInfo's and GetSchema's CMD descriptor
// (DoPut's descriptor works too; its other fields are ignored) and the
// descriptor of every FlightInfo the sidecar returns.
type StageRef struct {
	Query string `json:"query"`
	Stage int    `json:"stage"`
}

// ListCriteria is ListFlights' optional criteria expression, as JSON.
type ListCriteria struct {
	Query string `json:"query,omitempty"` // only this query's stages
}

// StageMetadata is the JSON app_metadata of a FlightInfo.
type StageMetadata struct {
	Query        string `json:"query"`
	Stage        int    `json:"stage"`
	Sealed       bool   `json:"sealed"`
	Results      bool   `json:"results,omitempty"`
	Workers      int    `json:"workers"`
	Partitions   int    `json:"partitions"`
	Rows         int64  `json:"rows"`
	BytesLogical int64  `json:"bytes_logical"`
	BytesStored  int64  `json:"bytes_stored"`
	Objects      int    `json:"objects"`
	Frames       int    `json:"frames"`
}

// PartitionMetadata is the JSON app_metadata of a FlightEndpoint.
type PartitionMetadata struct {
	Partition    int   `json:"partition"`
	Rows         int64 `json:"rows"`
	BytesLogical int64 `json:"bytes_logical"`
	BytesStored  int64 `json:"bytes_stored"`
	Frames       int   `json:"frames"`
}

// SealRequest is the body of the seal-stage action; query, stage and
// workers are required. Combine then combines the stage in the sidecar
// (parallel tasks at a time, default 4) when its plan says combining
// pays; the result says whether it did, and the plan's predictions.
type SealRequest struct {
	Query    string `json:"query"`
	Stage    int    `json:"stage"`
	Workers  int    `json:"workers"`
	Combine  bool   `json:"combine,omitempty"`
	Parallel int    `json:"parallel,omitempty"`
}

// SealResult is the body of seal-stage's one result.
type SealResult struct {
	Sealed       bool   `json:"sealed"`
	Query        string `json:"query"`
	Stage        int    `json:"stage"`
	Workers      int    `json:"workers"`
	Partitions   int    `json:"partitions"`
	Rows         int64  `json:"rows"`
	BytesLogical int64  `json:"bytes_logical"`
	BytesStored  int64  `json:"bytes_stored"`
	Objects      int    `json:"objects"`
	Key          string `json:"key"`
	// With combine: whether the stage was combined, and the plan made
	// (absent when the stage was combined already).
	Combined  bool               `json:"combined,omitempty"`
	Plan      string             `json:"plan,omitempty"`
	Predicted *CombinePrediction `json:"predicted,omitempty"`
}

// CombineRequest is the body of the combine action. Query and stage are
// required; groups and buckets fix G and J (0: sized from the stage's
// bytes), and every caller of one stage's combining must send the same.
// At most one of task, seal, plan and group: task runs that task only,
// seal only seals, plan only plans, group forms that group; none runs
// every task (parallel at a time, default 4) and seals. Expect_workers
// and expect_partitions (with expect_bytes, the stage's expected size)
// plan the stage while it is written (combine.Options.Expected); group
// and group_workers then form a group from the workers named, or the
// next to commit.
type CombineRequest struct {
	Query    string `json:"query"`
	Stage    int    `json:"stage"`
	Groups   int    `json:"groups,omitempty"`
	Buckets  int    `json:"buckets,omitempty"`
	Task     *int   `json:"task,omitempty"`
	Seal     bool   `json:"seal,omitempty"`
	Plan     bool   `json:"plan,omitempty"`
	Parallel int    `json:"parallel,omitempty"`

	ExpectWorkers    int      `json:"expect_workers,omitempty"`
	ExpectPartitions int      `json:"expect_partitions,omitempty"`
	ExpectBytes      int64    `json:"expect_bytes,omitempty"`
	Group            *int     `json:"group,omitempty"`
	GroupWorkers     []string `json:"group_workers,omitempty"`
}

// CombineResult is the body of combine's one result.
type CombineResult struct {
	Query string `json:"query"`
	Stage int    `json:"stage"`
	// Plan is the plan's ID (empty when the stage was already combined).
	Plan    string `json:"plan,omitempty"`
	Groups  int    `json:"groups"`
	Buckets int    `json:"buckets"`
	Tasks   int    `json:"tasks"`
	// Wrote counts the tasks this call committed; the others it ran were
	// committed already.
	Wrote     int                `json:"wrote"`
	Sealed    bool               `json:"sealed"`
	Combined  bool               `json:"combined"` // the stage reads the combined level
	Rows      int64              `json:"rows"`     // of the tasks run, or of the combined level
	Predicted *CombinePrediction `json:"predicted,omitempty"`
	// GroupWorkers are the workers of the group formed.
	GroupWorkers []string `json:"group_workers,omitempty"`
}

// CombinePrediction is a plan's predicted requests: the readers' GETs as
// written and combined, and combining's own GETs and PUT-class requests.
type CombinePrediction struct {
	DirectGETs   int64 `json:"direct_gets"`
	CombineGETs  int64 `json:"combine_gets"`
	CombinePUTs  int64 `json:"combine_puts"`
	CombinedGETs int64 `json:"combined_gets"`
	Pays         bool  `json:"pays"`
}

// DeleteRequest is the body of the delete-query action.
type DeleteRequest struct {
	Query string `json:"query"`
}

// DeleteResult is the body of delete-query's one result.
type DeleteResult struct {
	Query          string `json:"query"`
	DeletedObjects int    `json:"deleted_objects"`
	AbortedUploads int    `json:"aborted_uploads"`
}

// GCRequest is the body of the gc action.
type GCRequest struct {
	OlderThan string `json:"older_than"`
	// CombinedGrace, when set and positive, deletes the first level of
	// stages combined longer ago than this (gc --combined-grace); absent
	// or "0s" keeps first levels.
	CombinedGrace string `json:"combined_grace,omitempty"`
}

// GCReport is the gc action's one result: what gc scanned, and the
// uploads it aborted, the orphan objects and the results stages it
// deleted, with their totals. Its JSON is that of `durashuffle gc
// --json`: the sidecar and the CLI answer in one format.
type GCReport struct {
	DryRun bool      `json:"dry_run"`
	Prefix string    `json:"prefix"`          // the layout's root
	Query  string    `json:"query,omitempty"` // delete-query only
	Now    time.Time `json:"now"`
	// Cutoff: uploads initiated and orphans modified at or before it are
	// removed.
	Cutoff time.Time `json:"cutoff,omitzero"`
	// ResultsCutoff: results stages committed at or before it are
	// deleted.
	ResultsCutoff time.Time `json:"results_cutoff,omitzero"`
	// CombinedCutoff: first levels of stages whose combined seal is at or
	// before it are deleted (with a combined_grace only).
	CombinedCutoff time.Time  `json:"combined_cutoff,omitzero"`
	Scanned        GCScanned  `json:"scanned"`
	Uploads        []GCUpload `json:"aborted_uploads"`
	Orphans        []GCObject `json:"orphan_objects"`
	Stages         []GCStage  `json:"deleted_stages"`
	// Skipped says what gc left alone because it could not tell whether
	// it is in use (e.g. a manifest that does not decode), and why.
	Skipped []string `json:"skipped,omitempty"`
	Totals  GCTotals `json:"totals"`
}

// GCScanned counts what gc looked at.
type GCScanned struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
	Uploads int   `json:"uploads"`
	Stages  int   `json:"stages"`
	// Foreign keys and uploads under the prefix that do not have the
	// layout's shape; gc leaves them alone.
	Foreign int `json:"foreign"`
}

// GCUpload is an incomplete multipart upload gc aborted.
type GCUpload struct {
	Key       string    `json:"key"`
	UploadID  string    `json:"upload_id"`
	Initiated time.Time `json:"initiated"`
}

// GCObject is an orphan data object gc deleted.
type GCObject struct {
	Key          string    `json:"key"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
}

// GCStage is a stage gc deleted (expired results, or part of a deleted
// query).
type GCStage struct {
	Query     string `json:"query"`
	Stage     int    `json:"stage"`
	Results   bool   `json:"results"`
	Sealed    bool   `json:"sealed"`
	Manifests int    `json:"manifests"` // stage, combined level's, worker and task manifests, and indexes
	Objects   int    `json:"objects"`   // data objects, combined objects included
	Bytes     int64  `json:"bytes"`     // of manifests and data objects
	// CommittedAt is the newest manifest's LastModified.
	CommittedAt time.Time `json:"committed_at,omitzero"`
}

// GCTotals sum a GCReport.
type GCTotals struct {
	UploadsAborted int   `json:"uploads_aborted"`
	OrphanObjects  int   `json:"orphan_objects"`
	OrphanBytes    int64 `json:"orphan_bytes"`
	StagesDeleted  int   `json:"stages_deleted"`
	ObjectsDeleted int   `json:"objects_deleted"` // orphans and the stages' objects, manifests included
	BytesDeleted   int64 `json:"bytes_deleted"`
}

// ReleaseRequest is the body of release: {"query","stage"}; without
// stage, every stage of the query.
type ReleaseRequest struct {
	Query string `json:"query"`
	Stage *int   `json:"stage,omitempty"`
}

// ReleaseResult is release's answer.
type ReleaseResult struct {
	Query         string `json:"query"`
	Stage         *int   `json:"stage,omitempty"`
	Workers       int    `json:"workers"`
	BytesReleased int64  `json:"bytes_released"`
}

// HeldRequest is the body of held: {"query","stage"}; empty query: every
// query, no stage: every stage.
type HeldRequest struct {
	Query string `json:"query,omitempty"`
	Stage *int   `json:"stage,omitempty"`
}

// HeldWorker is one worker attempt in memory (the library's
// durashuffle.HeldWorker too).
type HeldWorker = held.Worker

// HeldResult is held's answer: the memory store's budget, what it holds
// and reserves, and the workers.
type HeldResult struct {
	AdvertiseAddr string       `json:"advertise_addr,omitempty"`
	BudgetBytes   int64        `json:"budget_bytes"`
	HeldBytes     int64        `json:"held_bytes"`
	ReservedBytes int64        `json:"reserved_bytes"`
	Workers       []HeldWorker `json:"workers"`
}

// FetchRequest is the body of fetch: bytes [offset, offset+length) of
// data object `object` (its index in the worker manifest) of a committed
// worker attempt.
type FetchRequest struct {
	Query   string `json:"query"`
	Stage   int    `json:"stage"`
	Worker  string `json:"worker"`
	Attempt string `json:"attempt"`
	Object  int    `json:"object"`
	Offset  int64  `json:"offset"`
	Length  int64  `json:"length"`
}
