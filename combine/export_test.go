package combine

// The key grammar of a plan's objects, for the tests of package
// combine_test that look for them in the bucket.
var (
	PlanDir          = planDir
	TaskManifestName = taskManifestName
	TaskDataName     = taskDataName
	TaskDataKey      = taskDataKey
)
