package reader

// RowsBefore exposes the test helper to the package's external tests.
var RowsBefore = rowsBefore
