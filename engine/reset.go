package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrResetRefused: someone other than the caller holds a live lease in the
// pool, or a live `pooltop work` process runs on it.
var ErrResetRefused = errors.New("reset refused")

// ResetPool empties the pool and its ledger, for a demo scenario or a
// benchmark run that starts afresh. ours is the suffix of the caller's own
// holder names (a workload's run id; "" when it has none).
//
// Tokens never go back: ids are not reused (the id sequence goes on), so a
// lease taken before the reset names an id that no longer exists, and its
// commit is rejected as a lost lease instead of landing on a new owner's
// row that starts again at token 0. And the reset is refused while another
// holder has a live lease or another work process beats in pooltop_worker:
// it would take their ids from under them. The check and the TRUNCATE run
// in one transaction that locks both tables first, so no lease can be taken
// between them.
func (e *Engine) ResetPool(ctx context.Context, ours string) error {
	return pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE resource_pool, business_ledger IN ACCESS EXCLUSIVE MODE"); err != nil {
			return fmt.Errorf("reset: lock the pool: %w", err)
		}
		var leases int64
		var holder *string
		err := tx.QueryRow(ctx, `
SELECT count(*), min(holder) FROM resource_pool
WHERE status = 'PENDING' AND leased_until > clock_timestamp()
  AND ($1 = '' OR holder IS NULL OR holder NOT LIKE '%-' || $1)`, ours).Scan(&leases, &holder)
		if err != nil {
			return fmt.Errorf("reset: look for other holders: %w", err)
		}
		var procs []string
		err = tx.QueryRow(ctx, `
SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM pooltop_worker
WHERE stopped_at IS NULL AND last_seen > now() - 3 * heartbeat_s * interval '1 second'
  AND ($1 = '' OR run_id <> $1)`, ours).Scan(&procs)
		if err != nil {
			return fmt.Errorf("reset: look for work processes: %w", err)
		}
		if leases > 0 || len(procs) > 0 {
			var who []string
			if leases > 0 {
				h := "(none)"
				if holder != nil {
					h = *holder
				}
				who = append(who, fmt.Sprintf("%d live lease(s) held by others (holder %q among them)", leases, h))
			}
			if len(procs) > 0 {
				who = append(who, fmt.Sprintf("pooltop work process(es) %s running on it", strings.Join(procs, ", ")))
			}
			return fmt.Errorf("%w: %s: emptying the pool would take their ids from under them; stop them, or wait for the leases to end, then reset", ErrResetRefused, strings.Join(who, " and "))
		}
		if _, err := tx.Exec(ctx, "TRUNCATE business_ledger, resource_pool"); err != nil {
			return fmt.Errorf("empty the pool: %w", err)
		}
		return nil
	})
}
