// Package combine rewrites a sealed stage's data into fewer, larger
// objects, so that its readers make G GETs per partition range instead
// of one per writer object: a stage of W writer objects read by R
// readers costs about W x R GETs as written, and W x J + R x G combined
// (J partition buckets, G writer groups), plus a second write of the
// data.
//
// Open reads the stage and makes a Plan (MakePlan, a pure function of
// the stage's sizes and Options): J contiguous partition buckets
// balanced by bytes, G contiguous groups of workers, C = G x J tasks,
// and a prediction of the requests with and without combining. Task n
// (RunTask) reads its group's writer objects' frames of its bucket, one
// ranged GET per object (per run of frames when the writer did not
// spill), checks each frame's CRC32C, and copies the frames as they are,
// in (partition, writer) order, into one object, committed by a task
// manifest put with If-None-Match (the first attempt wins; a rerun
// returns the committed task). Seal, once every task has committed,
// writes the combined level's index and stage manifest and publishes it
// as the stage's manifest.json, so every reader (OpenStage, the command
// line's read, the sidecar's DoGet) reads the combined objects with no
// new API and the same one GET to open the stage. The key layout and
// the commit protocol are in docs/format.md ("Combined stages").
//
// A task holds its bytes once: its GETs read each frame straight into
// its place in the combined object, whose parts are then slices of that
// buffer (fetches and Options.Uploads in flight). A task over
// Options.MemoryBytes, given Options.Scratch (Client.Combine gives the
// client's spill_dir), lays the object out in a file of its size there
// and uploads it in sections, so that TaskCapBytes bounds disk, not
// memory.
//
// The combined level's rows are the first level's, partition by
// partition in the same order: groups are contiguous runs of workers in
// the stage manifest's order, and tasks are numbered so that the
// combined level's workers keep it.
//
// Tasks may also start while the map stage runs (Options.Expected): the
// plan is made from what the engine expects, group g is the next workers
// to commit (Stage.FormGroup, fixed by a record committed under the
// plan), a task reads its group's worker manifests instead of an index,
// and Seal checks the groups against the sealed first level. Within a
// partition the combined level then holds the groups in commit order.
package combine
