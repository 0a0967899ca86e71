package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err means that the server did not answer
// (refused, cut, shut down, out of connections, timed out) rather than that
// it answered with a refusal: such a server is shown as not answering and
// tried again (a watch over several pools).
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	for _, logical := range []error{ErrInvalidArgument, ErrPoolEmpty, ErrLeaseLost, ErrStaleToken, ErrNotFound,
		ErrRequestConflict, ErrContended, ErrTokenExhausted, ErrNoSchema, ErrNotPooltop, context.Canceled} {
		if errors.Is(err, logical) {
			return false
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unreachableCode(pgErr.Code)
	}
	var ce *ConnError
	if errors.As(err, &ce) && ce.Code != "" {
		return unreachableCode(ce.Code) // a password refused is an answer
	}
	return true
}

// unreachableCode says whether a SQLSTATE means the server is not there to
// answer (connection, resources, shut down, crashed, starting up) rather
// than an answer (a timeout, a lock not available, a constraint, a wrong
// password).
func unreachableCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	case code == "57P01", code == "57P02", code == "57P03":
		return true
	}
	return false
}

// CountStatus counts the pool's rows in status st: a scan of the pool, for
// campaigns and tests, not for a dashboard.
func (e *Engine) CountStatus(ctx context.Context, st Status) (int64, error) {
	var n int64
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM resource_pool WHERE status = $1`, st).Scan(&n); err != nil {
		return 0, dbError("count "+st, err)
	}
	return n, nil
}

// Identifier is the identifier a seed gives id n.
func Identifier(n int64) string { return fmt.Sprintf("res-%010d", n) }
