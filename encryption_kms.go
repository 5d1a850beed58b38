package durashuffle

import (
	"context"
	"fmt"

	"github.com/durashuffle/durashuffle/internal/keys"
)

func kmsProvider(ctx context.Context, cfg Config, o options) (keys.Provider, error) {
	return nil, fmt.Errorf("%w: encryption_kms_key_id: KMS is not built in", ErrInvalidConfig)
}
