// Package testenv gives tests an S3 endpoint with a fresh bucket: the
// embedded server, a MinIO server or a versitygw gateway it starts itself
// (once per test binary), or the endpoint named by DURASHUFFLE_TEST_ENDPOINT.
// It never skips: a server that cannot be started fails the test with the
// reason, so a green run always means the tests ran.
package testenv
