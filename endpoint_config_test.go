package durashuffle

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/retry"
)

// TestValidateEndpoint: an endpoint that is not an http or https URL with
// a host is a configuration error naming the key and the value, found by
// Validate (Open) rather than at the first request; good ones pass.
func TestValidateEndpoint(t *testing.T) {
	for _, bad := range []string{"not a url", " ", "127.0.0.1:9000", "ftp://x", "http://", "https:///bucket",
		"http://host:99999", "http://host:0", "http://user:pw@host", "http://host/?a=b", "http://host/#f", "http:host"} {
		cfg := DefaultConfig()
		cfg.Store.Endpoint = bad
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), fmt.Sprintf("endpoint must be empty (the AWS chain) or an http:// or https:// URL with a host, such as http://127.0.0.1:9000, got %q", bad)) {
			t.Errorf("endpoint %q: Validate() = %v", bad, err)
		}
	}
	for _, good := range []string{"", "http://127.0.0.1:9000", "https://s3.eu-west-1.amazonaws.com", "HTTPS://minio.internal", "http://[::1]:9000", "https://gw.example.com/s3"} {
		cfg := DefaultConfig()
		cfg.Store.Endpoint = good
		if err := cfg.Validate(); err != nil {
			t.Errorf("endpoint %q: %v", good, err)
		}
	}
}

func TestValidateTimeouts(t *testing.T) {
	for _, c := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Store.ConnectTimeout = 0 }, "connect_timeout must be between 100ms and 5m0s, got 0s"},
		{func(c *Config) { c.Store.ConnectTimeout = Duration(time.Hour) }, "connect_timeout must be between 100ms and 5m0s, got 1h0m0s"},
		{func(c *Config) { c.Store.FirstByteTimeout = Duration(time.Millisecond) }, "first_byte_timeout must be between 1s and 1h0m0s, got 1ms"},
	} {
		cfg := DefaultConfig()
		c.mut(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

// TestTimeoutBoundsDocumented: the bounds the doc tags of connect_timeout
// and first_byte_timeout state are those the defaults give, and the one
// for an endpoint that drops packets is about a minute.
func TestTimeoutBoundsDocumented(t *testing.T) {
	cfg := DefaultConfig()
	p := retry.Policy{MaxAttempts: cfg.Store.RetryMaxAttempts, BaseDelay: cfg.Store.RetryBaseDelay.D(), MaxDelay: cfg.Store.RetryMaxDelay.D()}
	n := time.Duration(cfg.Store.RetryMaxAttempts)
	backoffs := p.MaxBackoffs()
	dead := n*cfg.Store.ConnectTimeout.D() + backoffs
	stalled := n*cfg.Store.FirstByteTimeout.D() + backoffs
	vanished := cfg.Store.FirstByteTimeout.D() + (n-1)*cfg.Store.ConnectTimeout.D() + backoffs
	if dead > 65*time.Second {
		t.Errorf("a dead endpoint fails a request after up to %v with the defaults, not about a minute", dead)
	}
	doc := map[string]string{}
	for _, k := range configKeys() {
		doc[k.name] = k.field.Tag.Get("doc")
	}
	for key, want := range map[string][]string{
		"connect_timeout":    {dead.String(), fmt.Sprintf("%d x %v", cfg.Store.RetryMaxAttempts, cfg.Store.ConnectTimeout), "at most " + backoffs.String()},
		"first_byte_timeout": {stalled.String(), vanished.String()},
	} {
		for _, w := range want {
			if !strings.Contains(doc[key], w) {
				t.Errorf("the doc of %s does not say %q: %s", key, w, doc[key])
			}
		}
	}
}
