// Package storetest is the contract every store.Store must meet, as one
// exported test suite run against each backend: the embedded server,
// MinIO, and LocalStack or AWS when an endpoint is given.
// Every case asserts the bytes and results that come back, so a backend
// that drops, reorders or misclassifies anything fails by name.
package storetest
