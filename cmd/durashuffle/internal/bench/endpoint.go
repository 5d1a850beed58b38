package bench

import (
	"crypto/tls"
	"fmt"
)

// StartMemServerHTTPS starts the in-memory S3 endpoint with bucket over
// HTTPS, on a certificate made for the run in dir, and returns it with
// the TLS configuration a client trusts it by.
func StartMemServerHTTPS(dir, bucket string) (*MemServer, *tls.Config, error) {
	serverTLS, caFile, err := benchTLS(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("bench certificate: %w", err)
	}
	client, err := clientTLS(caFile, false)
	if err != nil {
		return nil, nil, err
	}
	srv, err := StartMemServerTLS(serverTLS, bucket)
	if err != nil {
		return nil, nil, err
	}
	return srv, client, nil
}
