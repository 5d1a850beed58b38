// Package gc removes what durashuffle leaves behind in the bucket: multipart
// uploads and attempt data of writers that crashed or lost a commit race,
// results stages past results_retention, and whole queries on request.
// It only touches keys under the configured prefix that have the layout's
// shape ({query}/stage-{n}/...), and deletes manifests before the data they
// point to, so no manifest is ever left naming an object gc removed.
package gc
