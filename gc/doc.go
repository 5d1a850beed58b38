// Package gc removes what durashuffle leaves behind in the bucket: multipart
// uploads and attempt data of writers that crashed or lost a commit race,
// results stages past results_retention, and whole queries on request.
// NewPlan lists and judges, and its Plan is a value that says what would be
// removed (a dry run is the plan alone); Apply carries it out. It only
// touches keys under the configured prefix that manifest.Layout.Parse
// reads ({query}/stage-{n}/...), and deletes manifests before the data they
// point to, so no manifest is ever left naming an object gc removed.
package gc
