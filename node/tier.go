package node

import (
	"context"
	"log/slog"

	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
)

// openTier opens the configured object store (with the --s3-ca roots) and
// builds the object tier over it: the wiring of tiering.Tier, which holds
// the logic.
func openTier(ctx context.Context, cfg Config, log *slog.Logger) (*tiering.Tier, error) {
	var opts []storeurl.Option
	if cfg.S3CA != "" {
		pool, err := loadCAPool("--s3-ca", cfg.S3CA)
		if err != nil {
			return nil, err
		}
		opts = append(opts, storeurl.WithRootCAs(pool))
	}
	store, err := storeurl.Open(ctx, cfg.ObjectStore, opts...)
	if err != nil {
		return nil, err
	}
	return tiering.NewTier(store, tiering.TierOptions{CacheBytes: cfg.CacheBytes, ReadAheadBytes: cfg.ReadAheadBytes, Pretouch: cfg.CachePretouch, Log: log})
}
