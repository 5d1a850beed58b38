// Package s3store implements store.Store on Amazon S3 and S3-compatible
// servers (MinIO, LocalStack, the embedded server) with aws-sdk-go-v2.
// It is the only package that sends requests with the SDK (the root's
// options and the embedded server name only its aws.Config and credential
// types; the bench's contenders are the SDK's transfer managers): it turns
// the SDK's own retries off, counts every HTTP request, and classifies
// every error so the single retry layer above it can decide.
package s3store
