// Package azstore is durashuffle's object store on Azure Blob Storage: a
// store.Store on one container, whose multipart uploads are block blobs
// assembled from staged blocks.
// Its own module, so that a program using only S3 never downloads the
// Azure SDK.
package azstore
