package gc

import "time"

// Options say what a run of gc may remove.
type Options struct {
	// OlderThan protects work in progress: an incomplete upload is aborted
	// only if it was initiated, and an unreferenced data object deleted
	// only if it was last modified, at least this long before Now. It must
	// exceed the longest a writer takes from its first part to its commit,
	// or gc deletes the data of a writer that is about to commit (whose
	// manifest would then name missing objects). 0 takes everything that
	// is not committed, which is only safe when no writer is running.
	//
	// It is also the grace of combining (package combine): the keys of a
	// combine plan of a stage that is not combined go once the plan's
	// newest key and open upload are this old, so it must exceed the
	// longest a combining pauses between two task commits and from its
	// last task commit to its seal.
	OlderThan time.Duration
	// ResultsRetention is how long a results stage (manifests with
	// Results set) is kept after its last manifest was written; then the
	// whole stage is deleted. 0 deletes results stages at once. Intermediate
	// stages are never expired: they live until their query is deleted.
	ResultsRetention time.Duration
	// CombinedGrace, when positive, removes the first level of a
	// combined stage (package combine) once its combined seal is this
	// old: the writers' data objects, their worker manifests (first) and
	// the first level's index. Readers that opened the stage before the
	// combined seal read the first level; this is how long they have.
	// 0 keeps the first level until the query is deleted.
	CombinedGrace time.Duration
	// Now is the clock (default time.Now). Ages compare Now with the
	// store's LastModified and Initiated times.
	Now func() time.Time
}

// Upload is an incomplete multipart upload.
type Upload struct {
	Key       string    `json:"key"`
	UploadID  string    `json:"upload_id"`
	Initiated time.Time `json:"initiated"`
}

// Object is a stored object.
type Object struct {
	Key          string    `json:"key"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
}

// Stage is a stage gc deleted (expired results, or part of a deleted query).
type Stage struct {
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

// Scanned counts what gc looked at.
type Scanned struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
	Uploads int   `json:"uploads"`
	Stages  int   `json:"stages"`
	// Foreign keys and uploads under the prefix that do not have the
	// layout's shape; gc leaves them alone.
	Foreign int `json:"foreign"`
}

// Totals sum a Report.
type Totals struct {
	UploadsAborted int   `json:"uploads_aborted"`
	OrphanObjects  int   `json:"orphan_objects"`
	OrphanBytes    int64 `json:"orphan_bytes"`
	StagesDeleted  int   `json:"stages_deleted"`
	ObjectsDeleted int   `json:"objects_deleted"` // orphans and the stages' objects, manifests included
	BytesDeleted   int64 `json:"bytes_deleted"`
}

// Report lists what gc did, or (a Plan's Report) would do.
type Report struct {
	DryRun bool      `json:"dry_run"`
	Prefix string    `json:"prefix"`          // the layout's root
	Query  string    `json:"query,omitempty"` // DeleteQuery only
	Now    time.Time `json:"now"`
	// Cutoff: uploads initiated and orphans modified at or before it are
	// removed (Run only).
	Cutoff time.Time `json:"cutoff,omitzero"`
	// ResultsCutoff: results stages committed at or before it are
	// deleted (Run only).
	ResultsCutoff time.Time `json:"results_cutoff,omitzero"`
	// CombinedCutoff: first levels of stages whose combined seal is at or
	// before it are deleted (Run with CombinedGrace only).
	CombinedCutoff time.Time `json:"combined_cutoff,omitzero"`
	Scanned        Scanned   `json:"scanned"`
	Uploads        []Upload  `json:"aborted_uploads"`
	Orphans        []Object  `json:"orphan_objects"`
	Stages         []Stage   `json:"deleted_stages"`
	// Skipped says what gc left alone because it could not tell whether
	// it is in use (e.g. a manifest that does not decode), and why.
	Skipped []string `json:"skipped,omitempty"`
	Totals  Totals   `json:"totals"`
}
