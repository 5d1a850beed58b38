// Package storetest is the contract every store.Store must meet, as one
// exported test suite: Run(t, st). durashuffle runs it against the
// embedded server, MinIO, versitygw and the bench's in-memory endpoint,
// directly and through the client's retry layer, and against LocalStack
// or AWS when an endpoint is given (make test-endpoint). A store of your
// own (another SDK, a wrapped S3 client, a fake for your tests) is fit for
// durashuffle when Run passes on it.
//
// Every case asserts the bytes and results that come back, so a store
// that drops, reorders or misclassifies anything fails by name: ranged
// GETs at and past the end, missing keys as store.ErrNotFound, the
// conditional put (exactly one winner of a race, the others
// store.ErrPreconditionFailed), CRC32C on puts and parts, multipart upload
// with parts out of order, a repeated Complete, abort and the listing of
// open uploads, prefix and delimiter listing, batch delete, and listing
// past one page.
package storetest
