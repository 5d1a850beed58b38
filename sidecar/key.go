package sidecar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/keys"
)

// A DoPut or DoGet may carry the query's root encryption key in its
// flightclient.KeyHeader metadata (64 hex digits or base64 of 32 bytes):
// the call's frames are sealed, or opened, under the stage key derived
// from it, whatever key the sidecar holds itself. The sidecar refuses it
// over plaintext gRPC (tls_cert_file unset): a key must not cross the
// wire in the clear. It is never logged nor kept past the call, but in
// the stages it caches for readers holding the same key.

// callKey returns the root key ctx's call carries, nil when it carries
// none.
func (s *Server) callKey(ctx context.Context) ([]byte, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(flightclient.KeyHeader)
	if len(vals) == 0 {
		return nil, nil
	}
	if s.tls == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "refusing the %s metadata over plaintext gRPC: serve with tls_cert_file and tls_key_file to take keys per call", flightclient.KeyHeader)
	}
	if len(vals) > 1 {
		return nil, status.Errorf(codes.InvalidArgument, "%d %s metadata values, want one", len(vals), flightclient.KeyHeader)
	}
	k, err := keys.Parse(vals[0])
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s metadata: %v", flightclient.KeyHeader, err)
	}
	return k, nil
}

// keyTag tells stages cached for one key from those of another, without
// keeping the key in the cache's map: "" for none.
func keyTag(key []byte) string {
	if key == nil {
		return ""
	}
	sum := sha256.Sum256(append([]byte("durashuffle sidecar cache\x00"), key...))
	return hex.EncodeToString(sum[:16])
}
