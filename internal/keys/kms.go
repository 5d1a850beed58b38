package keys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// KMSAPI is what KMS answers: a new data key, and the unwrapping of one.
// *kms.Client has both.
type KMSAPI interface {
	GenerateDataKey(ctx context.Context, in *kms.GenerateDataKeyInput, optFns ...func(*kms.Options)) (*kms.GenerateDataKeyOutput, error)
	Decrypt(ctx context.Context, in *kms.DecryptInput, optFns ...func(*kms.Options)) (*kms.DecryptOutput, error)
}

// KMS gives each query a data key of its own from AWS KMS: the first
// writer of the query asks GenerateDataKey for one and stores it wrapped
// beside the query (KeyName) with a conditional create, so that writers
// racing on a new query agree on the one stored first (a loser unwraps
// the winner's); everyone else reads the wrapped key and asks Decrypt
// once. A process keeps every key it unwrapped, so its KMS calls are one
// per query, whatever its writers and readers. The query is the
// encryption context of both calls: a wrapped key copied to another
// query does not unwrap. Safe for concurrent use.
type KMS struct {
	api   KMSAPI
	keyID string
	st    store.Store
	keyOf func(query string) string

	mu    sync.Mutex
	cache map[string]*kmsEntry
}

// kmsEntry is one query's key, or the call in flight that gets it.
type kmsEntry struct {
	done  chan struct{}
	key   []byte
	keyID string // the KMS key that wraps it, as stored
	err   error
}

// KeyName is the wrapped data key of a query, relative to its prefix.
const KeyName = "key.json"

// wrapped is the stored form of a query's data key.
type wrapped struct {
	KMSKeyID string `json:"kms_key_id"`
	// Ciphertext is KMS's CiphertextBlob of the data key (base64 in
	// JSON); its plaintext is never stored.
	Ciphertext []byte `json:"ciphertext_blob"`
	Cipher     string `json:"cipher"`
}

// NewKMS returns the provider of data keys wrapped by keyID, stored in
// st at keyOf(query) (st carries the store's retry layer; api the SDK's
// own retryer, the one retry layer of KMS calls).
func NewKMS(api KMSAPI, keyID string, st store.Store, keyOf func(query string) string) *KMS {
	return &KMS{api: api, keyID: keyID, st: st, keyOf: keyOf, cache: make(map[string]*kmsEntry)}
}

// Root returns query's data key: from the process's cache, else
// unwrapped from the stored key, else (create) generated and stored. A
// failure is not kept: the next call tries again.
func (k *KMS) Root(ctx context.Context, query string, create bool) ([]byte, manifest.Encryption, error) {
	desc := manifest.Encryption{Cipher: Cipher, Source: "kms", KMSKeyID: k.keyID}
	key, keyID, err := k.root(ctx, query, create)
	if keyID != "" {
		// The key that wraps the stored data key, which the first writer
		// chose: every worker of the query records the same.
		desc.KMSKeyID = keyID
	}
	return key, desc, err
}

func (k *KMS) root(ctx context.Context, query string, create bool) ([]byte, string, error) {
	k.mu.Lock()
	e, ok := k.cache[query]
	if !ok {
		e = &kmsEntry{done: make(chan struct{})}
		k.cache[query] = e
	}
	k.mu.Unlock()
	if ok {
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, "", context.Cause(ctx)
		}
		if e.err == nil {
			return e.key, e.keyID, nil
		}
		if !create {
			return nil, "", e.err
		}
		return k.root(ctx, query, create) // the entry was dropped: try again
	}
	e.key, e.keyID, e.err = k.load(ctx, query, create)
	if e.err != nil {
		k.mu.Lock()
		delete(k.cache, query)
		k.mu.Unlock()
	}
	close(e.done)
	return e.key, e.keyID, e.err
}

// load reads and unwraps query's stored key, or makes one; it returns
// the KMS key that wraps it.
func (k *KMS) load(ctx context.Context, query string, create bool) ([]byte, string, error) {
	key := k.keyOf(query)
	key2, keyID, err := k.unwrap(ctx, query, key)
	if err == nil || !store.IsNotFound(err) {
		return key2, keyID, err
	}
	if !create {
		return nil, "", fmt.Errorf("%w: query %s has no data key (%s): none of its stages was written encrypted", ErrKey, query, key)
	}
	out, err := k.api.GenerateDataKey(ctx, &kms.GenerateDataKeyInput{
		KeyId: &k.keyID, KeySpec: types.DataKeySpecAes256, EncryptionContext: encContext(query),
	})
	if err != nil {
		return nil, "", fmt.Errorf("%w: KMS GenerateDataKey with key %s for query %s: %v", ErrKey, k.keyID, query, err)
	}
	if len(out.Plaintext) != Size {
		return nil, "", fmt.Errorf("%w: KMS GenerateDataKey with key %s for query %s: a key of %d bytes, want %d", ErrKey, k.keyID, query, len(out.Plaintext), Size)
	}
	b, err := json.Marshal(wrapped{KMSKeyID: k.keyID, Ciphertext: out.CiphertextBlob, Cipher: Cipher})
	if err != nil {
		return nil, "", err
	}
	err = k.st.Put(ctx, key, b, store.PutOptions{IfNoneMatch: true, ContentType: "application/json"})
	switch {
	case err == nil:
		return out.Plaintext, k.keyID, nil
	case errors.Is(err, store.ErrPreconditionFailed):
		// Another writer stored its key first: that one is the query's.
		return k.unwrap(ctx, query, key)
	}
	return nil, "", fmt.Errorf("%w: store the data key of query %s at %s: %v", ErrKey, query, key, err)
}

// unwrap reads the wrapped key at key and asks KMS to unwrap it; it
// returns the KMS key the stored key names.
func (k *KMS) unwrap(ctx context.Context, query, key string) ([]byte, string, error) {
	r, err := k.st.GetRange(ctx, key, 0, -1)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	r.Close()
	if err != nil {
		return nil, "", fmt.Errorf("read the data key of query %s at %s: %w", query, key, err)
	}
	var w wrapped
	if err := json.Unmarshal(b, &w); err != nil || len(w.Ciphertext) == 0 {
		return nil, "", fmt.Errorf("%w: the data key of query %s at %s does not parse (%d bytes): %v", ErrKey, query, key, len(b), err)
	}
	out, err := k.api.Decrypt(ctx, &kms.DecryptInput{CiphertextBlob: w.Ciphertext, KeyId: &w.KMSKeyID, EncryptionContext: encContext(query)})
	if err != nil {
		return nil, "", fmt.Errorf("%w: KMS Decrypt of the data key of query %s (%s, key %s): %v", ErrKey, query, key, w.KMSKeyID, err)
	}
	if len(out.Plaintext) != Size {
		return nil, "", fmt.Errorf("%w: KMS Decrypt of the data key of query %s: %d bytes, want %d", ErrKey, query, len(out.Plaintext), Size)
	}
	return out.Plaintext, w.KMSKeyID, nil
}

// encContext is the KMS encryption context of query's data key.
func encContext(query string) map[string]string {
	return map[string]string{"durashuffle-query": query}
}
