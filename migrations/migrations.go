// Package migrations holds pooltop's schema as embedded SQL and applies it
// with goose, so that `pooltop migrate`, the demo, bench, chaos and the tests
// all create exactly the same tables.
package migrations

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// VersionTable is the table goose records applied versions in, kept beside
// the pool in the same schema.
const VersionTable = "pooltop_migrations"

// lockKey is the advisory lock every migrating process takes, so two
// processes migrating at once run one after the other instead of colliding
// on CREATE SCHEMA or the version table.
const lockKey = 0x706f6f6c746f70 // "pooltop"

// Apply creates schema if needed and brings it to the newest version. It is
// idempotent and safe to run from several processes at once. cfg is not
// modified; its search_path is set to schema on a copy.
func Apply(ctx context.Context, cfg *pgx.ConnConfig, schema string) (int64, error) {
	if schema == "" {
		schema = "public"
	}
	lockConn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return 0, fmt.Errorf("migrate: connect: %w", err)
	}
	defer lockConn.Close(context.Background())

	if _, err := lockConn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(lockKey)); err != nil {
		return 0, fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	defer lockConn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(lockKey)) //nolint:errcheck // the lock also ends with the session

	quoted := pgx.Identifier{schema}.Sanitize()
	if _, err := lockConn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quoted); err != nil {
		return 0, fmt.Errorf("migrate: create schema %s: %w", quoted, err)
	}

	mcfg := cfg.Copy()
	if mcfg.RuntimeParams == nil {
		mcfg.RuntimeParams = map[string]string{}
	}
	mcfg.RuntimeParams["search_path"] = quoted
	// DDL may wait behind a long claim; do not let a short workload timeout cut it.
	mcfg.RuntimeParams["statement_timeout"] = "0"
	db := stdlib.OpenDB(*mcfg)
	defer db.Close()

	provider, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithTableName(schema+"."+VersionTable),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrate schema %s: %w", quoted, err)
	}
	v, err := provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	return v, nil
}
