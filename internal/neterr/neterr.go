// Package neterr says whether a request that got no response from an
// object store is worth sending again. The stores' error classification
// (S3's, GCS's) asks it when no HTTP status arrived.
package neterr

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
)

// Retryable reports whether err, a failure with no response, may not
// happen again: the connection was reset, refused (the server
// restarting), cut or timed out, or the socket failed (a proxy dropped
// us, a load balancer rotated). A certificate that was rejected, or a
// name that does not resolve, will be again.
func Retryable(err error) bool {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var dns *net.DNSError
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &hostname),
		errors.As(err, &certInvalid), errors.As(err, &verify):
		return false
	case errors.As(err, &dns) && dns.IsNotFound:
		return false
	}

	var timeout interface{ Timeout() bool }
	var opErr *net.OpError
	var conn interface{ ConnectionError() bool }
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed):
		return true
	case errors.As(err, &timeout) && timeout.Timeout():
		return true
	case errors.As(err, &opErr):
		return true
	case errors.As(err, &conn) && conn.ConnectionError():
		// The AWS SDK's RequestSendError: the request never got a
		// response.
		return true
	}
	return false
}
