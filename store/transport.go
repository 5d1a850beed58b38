package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
)

// TransportRetryable reports whether a request that got no response (err
// is the HTTP client's) may succeed if sent again: a reset, a refused or
// dropped connection, a timeout, a body cut short. A certificate the
// client rejects or a name that does not resolve fails the same way next
// time. Store implementations classify with it (Error.Retryable) when no
// status arrived.
func TransportRetryable(err error) bool {
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
		// Dial, read or write on the socket failed: the server restarted,
		// a proxy dropped us, a load balancer rotated.
		return true
	case errors.As(err, &conn) && conn.ConnectionError():
		// An SDK's send error (smithyhttp.RequestSendError): the request
		// never got a response.
		return true
	}
	return false
}
