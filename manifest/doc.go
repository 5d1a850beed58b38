// Package manifest is durashuffle's commit point and index: the worker
// manifest written last with a conditional put, and the stage manifest
// that seals a stage so a reader needs one GET for all of it. It also owns
// the object layout and the validation of IDs.
package manifest
