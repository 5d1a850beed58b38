package azstore

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/durashuffle/durashuffle/store"
)

// fakeToken is a Microsoft Entra ID credential that hands out one token.
type fakeToken struct{ scopes atomic.Value }

func (f *fakeToken) GetToken(_ context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.scopes.Store(o.Scopes)
	return azcore.AccessToken{Token: "durashuffle-test-token", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// TestTokenCredential: with neither a connection string nor a key, the
// store signs with the token credential, as a bearer token over TLS.
func TestTokenCredential(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	cred := &fakeToken{}
	st, err := New(t.Context(), Options{Container: "c", AccountName: "acct", Endpoint: srv.URL + "/acct", Credential: cred, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(t.Context(), "k", []byte("x"), store.PutOptions{}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got := auth.Load(); got != "Bearer durashuffle-test-token" {
		t.Errorf("Authorization = %q, want the credential's bearer token", got)
	}
	if s, _ := cred.scopes.Load().([]string); len(s) == 0 {
		t.Error("the credential was asked for a token of no scope")
	}

	// Without any credential the default chain is built, which needs no
	// request to be made.
	if _, err := New(t.Context(), Options{Container: "c", AccountName: "acct"}); err != nil {
		t.Errorf("New with the default credential chain: %v", err)
	}
	if _, err := New(t.Context(), Options{Container: "c"}); err == nil {
		t.Error("New with no account, endpoint or connection string: no error")
	}
}
