// Package gcsstore is durashuffle's object store on Google Cloud Storage,
// through its JSON API, with multipart uploads made of part objects that
// CompleteMultipart composes into the key. It is a module of its own, so
// that a program on S3 never builds the Google SDK.
package gcsstore
