// Package gc removes what durashuffle leaves behind in the bucket: multipart
// uploads and attempt data of writers that crashed or lost a commit race,
// results stages past results_retention, and whole queries on request.
// NewPlan lists and judges, and its Plan is a value that says what would be
// removed (a dry run is the plan alone); Apply carries it out. It only
// touches keys under the configured prefix that manifest.Layout.Parse
// reads ({query}/stage-{n}/...), and the keys of combined stages (package
// combine: {query}/stage-{n}/combined.json, {query}/stage-{n}/combine-{plan}/...
// and combined objects spread under a shard prefix), and deletes
// manifests before the data they point to, so no manifest is ever left
// naming an object gc removed. A query's wrapped KMS data key
// ({query}/key.json) is not a stage's: gc leaves it for as long as the
// query lives, and DeleteQuery deletes it with the query.
//
// Combined stages. A results stage that expires goes with its combined
// level: the combined level's manifest first, then the stage manifest,
// the worker and task manifests, and then the first level's and the
// combined level's objects and indexes. With Options.CombinedGrace the
// first level of a stage combined that long ago goes (worker manifests
// first). Once a stage is combined, the keys of plans that lost its seal
// and the winning plan's objects and indexes its manifest does not name
// go once older than OlderThan.
//
// Leftovers of combining a stage that is not combined (tasks killed, or
// a plan whose seal never came) go by the plan, not by the key: every
// key of a plan goes once the plan's newest key (task manifest, combined
// object, index) and newest open upload under it are at or before the
// cutoff (OlderThan), and only while the stage has no combined level's
// manifest (combined.json) and its stage manifest, if any, is the first
// level's and decodes. gc deletes them while it holds combined.json
// itself (package gchold: taken with If-None-Match, as a seal commits a
// level there, and deleted after), so that no seal commits a level
// while it deletes, and it deletes nothing while a level is there; once
// it holds it, it lists each plan's folder again and leaves a plan
// written to since it planned. A
// hold left by a gc that was killed is taken over by the first gc that
// finds it older than its cutoff. A plan that is still being combined
// writes a task manifest or starts an upload at least every OlderThan,
// and its seal comes within OlderThan of its last task commit; its older
// tasks are then kept, being what its seal will name. A combined seal
// that comes later than that may find tasks gone: it fails naming them,
// and the tasks run again.
package gc
