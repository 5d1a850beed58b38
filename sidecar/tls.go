package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/durashuffle/durashuffle"
)

// loadTLS builds the server TLS configuration of both ports from
// tls_cert_file and tls_key_file, and with tls_client_ca_file requires
// every client to present a certificate signed by one of those CAs. It
// returns nil when TLS is not configured. Errors name the keys and files,
// never what the files hold.
func loadTLS(cfg durashuffle.Config) (*tls.Config, error) {
	if cfg.Sidecar.TLSCertFile == "" && cfg.Sidecar.TLSKeyFile == "" {
		if cfg.Sidecar.TLSClientCAFile != "" {
			return nil, fmt.Errorf("%w: tls_client_ca_file is set without tls_cert_file and tls_key_file", durashuffle.ErrInvalidConfig)
		}
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.Sidecar.TLSCertFile, cfg.Sidecar.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: tls_cert_file %s and tls_key_file %s: %v", durashuffle.ErrInvalidConfig, cfg.Sidecar.TLSCertFile, cfg.Sidecar.TLSKeyFile, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.Sidecar.TLSClientCAFile != "" {
		pem, err := os.ReadFile(cfg.Sidecar.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: tls_client_ca_file: %v", durashuffle.ErrInvalidConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: tls_client_ca_file %s holds no PEM certificate", durashuffle.ErrInvalidConfig, cfg.Sidecar.TLSClientCAFile)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// ExposureWarnings lists what the configuration leaves open: a port
// listening beyond loopback without TLS, or the Flight port without
// auth_token. The sidecar logs each at start; none stops it.
func ExposureWarnings(cfg durashuffle.Config) []string {
	var out []string
	tlsOn := cfg.Sidecar.TLSCertFile != ""
	if !isLoopback(cfg.Sidecar.Listen) {
		if cfg.Sidecar.AuthToken == "" {
			out = append(out, fmt.Sprintf("listen %s is beyond loopback without auth_token: anyone who reaches the port can read and delete data", cfg.Sidecar.Listen))
		}
		if !tlsOn {
			out = append(out, fmt.Sprintf("listen %s is beyond loopback without TLS (tls_cert_file, tls_key_file): rows and the bearer token cross the network in the clear", cfg.Sidecar.Listen))
		}
	}
	if cfg.Sidecar.MetricsListen != "" && !isLoopback(cfg.Sidecar.MetricsListen) && !tlsOn {
		out = append(out, fmt.Sprintf("metrics_listen %s is beyond loopback without TLS (tls_cert_file, tls_key_file) and has no authentication", cfg.Sidecar.MetricsListen))
	}
	return out
}
