// Package s3store implements store.Store on Amazon S3 and S3-compatible
// servers (MinIO, LocalStack, the embedded server) with aws-sdk-go-v2.
// It is the only package that imports the SDK: it turns the SDK's own
// retries off, counts every HTTP request, and classifies every error so the
// single retry layer above it can decide.
package s3store
