// Package storesuite is durashuffle's end-to-end and hostile suite over
// any store: a Writer's commit read back in every read order, abort,
// racing attempts, seal, refused input, damaged objects and a fault
// matrix, each asserting exact rows and what the bucket holds afterwards.
// The S3 tests and the Azure and GCS store modules run the same cases
// against their servers (Run), so that no store is held to less.
package storesuite
