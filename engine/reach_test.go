package engine_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pooltop-dev/pooltop/engine"
)

func TestUnreachable(t *testing.T) {
	t.Parallel()
	check := func(err error, want bool) {
		t.Helper()
		if got := engine.Unreachable(err); got != want {
			t.Errorf("Unreachable(%v) = %v, want %v", err, got, want)
		}
	}
	for err, want := range map[error]bool{
		&pgconn.PgError{Code: "57P01"}:                       true,  // admin shutdown
		&pgconn.PgError{Code: "08006"}:                       true,  // connection failure
		&pgconn.PgError{Code: "53300"}:                       true,  // too many connections
		&pgconn.PgError{Code: "57014"}:                       false, // statement timeout: the server answered
		&pgconn.PgError{Code: "55P03"}:                       false, // lock not available
		engine.ErrPoolEmpty:                                  false,
		fmt.Errorf("x: %w", engine.ErrStaleToken):            false,
		errors.New("dial tcp 127.0.0.1:1: connect: refused"): true,
	} {
		check(err, want)
	}
	// Connection failures as ConnectError words them: refused by the
	// server is an answer, no server is not.
	cc, err := pgx.ParseConfig("postgres://app:secret@db.example:5432/pool")
	if err != nil {
		t.Fatal(err)
	}
	check(engine.ConnectError(cc, &pgconn.PgError{Code: "28P01"}), false)
	check(fmt.Errorf("open: %w", engine.ConnectError(cc, &pgconn.PgError{Code: "3D000"})), false)
	check(engine.ConnectError(cc, &pgconn.PgError{Code: "57P03"}), true)
	check(engine.ConnectError(cc, errors.New("dial tcp 10.0.0.1:5432: connect: connection refused")), true)
}
