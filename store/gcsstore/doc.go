// Package gcsstore is durashuffle's object store on Google Cloud Storage,
// through its JSON API (cloud.google.com/go/storage), with multipart
// uploads made of part objects composed into the key on Complete.
// Programs that use it import it alone; a program on S3 never builds the
// Google SDK.
package gcsstore
