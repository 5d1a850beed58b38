// Package keys turns the keys a durashuffle client is given into the
// stage keys its frames are sealed with: a root key (handed in memory,
// read from a key file or the environment, or a query's data key from
// KMS) is never used on frames itself; each stage gets its own key,
// derived with HKDF-SHA256, and a fingerprint that names it in the
// manifests without revealing it.
package keys
