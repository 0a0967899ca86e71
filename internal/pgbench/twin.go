package pgbench

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// Twin is a bench mode as pgbench runs it: the statements the engine sends
// for one acquire → fenced commit cycle of that strategy, in the same order,
// on the same tables, with the same literals where the engine binds values.
type Twin struct {
	Strategy string // skip-locked, blocking, optimistic, batched
	Batch    int    // ids per claim and per commit (batched only)
}

// Holder is the holder name the twin's leases carry.
const Holder = "pgbench"

// TwinScript is the pgbench script of t: one transaction of the script is
// one cycle (or, for optimistic, one attempt: a lost race commits nothing,
// and the next transaction tries again, as the engine's retry loop does).
// ttl is the lease; with delay each statement waits that long before it is
// sent, as bench --rtt delays pooltop's. On a hash-partitioned pool (parts
// holds its partitions) each cycle claims from one partition drawn at
// random, as the engine does, and commits through the parent.
//
// Where pgbench cannot take a result as the engine does, the statement is
// wrapped, never changed: the batched claim's rows are gathered into arrays
// (pgbench binds one row to variables), with request ids made from the ids.
func TwinScript(t Twin, ttl, delay time.Duration, parts []string) (string, error) {
	sleep := ""
	if delay > 0 {
		sleep = fmt.Sprintf("\\sleep %d us\n", delay.Microseconds())
	}
	lease := strconv.FormatInt(ttl.Microseconds(), 10)
	holder := "'" + Holder + "'"
	commit := sleep + Literal(engine.CommitSQL, ":id", ":lease_token", "'"+Holder+"-' || :id", holder, "''") + ";\n"
	var claim func(table string) string
	switch t.Strategy {
	case "skip-locked":
		claim = func(table string) string {
			return sleep + engine.OnPartition(Literal(engine.ClaimSQL(1), holder, lease), table) + "\n\\gset\n"
		}
	case "blocking":
		lock, load := engine.BlockingSQL(1)
		claim = func(table string) string {
			return sleep + "BEGIN;\n" +
				sleep + engine.OnPartition(Literal(lock), table) + "\n\\gset\n" +
				sleep + engine.OnPartition(Literal(load, "ARRAY[:id::bigint]"), table) + ";\n" +
				sleep + engine.OnPartition(Literal(engine.ChosenSQL(1), holder, lease, "ARRAY[:id::bigint]", "ARRAY[NULL::bigint]"), table) + "\n\\gset\n" +
				sleep + "COMMIT;\n"
		}
	case "optimistic":
		// A lost race returns no row: \aset then leaves lease_token at -1
		// and the cycle commits nothing.
		claim = func(table string) string {
			return "\\set lease_token -1\n" +
				sleep + engine.OnPartition(Literal(engine.OptimisticReadSQL(1)), table) + "\n\\gset r_\n" +
				sleep + engine.OnPartition(Literal(engine.ChosenSQL(1), holder, lease, "ARRAY[:r_id::bigint]", "ARRAY[:r_lease_token::bigint]"), table) + "\n\\aset\n"
		}
		commit = "\\if :lease_token > 0\n" + commit + "\\endif\n"
	case "batched":
		if t.Batch < 1 || t.Batch > engine.MaxBatch {
			return "", fmt.Errorf("batch %d: between 1 and %d", t.Batch, engine.MaxBatch)
		}
		gathered, err := gatherClaim(engine.ClaimSQL(t.Batch))
		if err != nil {
			return "", err
		}
		claim = func(table string) string {
			return sleep + engine.OnPartition(Literal(gathered, holder, lease), table) + "\n\\gset\n"
		}
		commit = sleep + Literal(engine.CommitBatchSQL, ":ids", ":tokens", ":reqs", ":payloads", holder) + ";\n"
	default:
		return "", fmt.Errorf("strategy %q has no pgbench twin", t.Strategy)
	}
	if len(parts) == 0 {
		return claim("resource_pool") + commit, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\\set shard random(0, %d)\n", len(parts)-1)
	for i, part := range parts {
		word := "\\elif"
		if i == 0 {
			word = "\\if"
		}
		fmt.Fprintf(&b, "%s :shard = %d\n%s", word, i, claim(part))
	}
	b.WriteString("\\endif\n" + commit)
	return b.String(), nil
}

// gatherClaim turns the claim (WITH locked AS (…) UPDATE … RETURNING …) into
// the same CTE and UPDATE whose rows are gathered into one row of arrays:
// ids, tokens, request ids and payloads for the batched commit.
func gatherClaim(claim string) (string, error) {
	i := strings.Index(claim, "UPDATE resource_pool")
	if i < 0 || !strings.HasPrefix(strings.TrimSpace(claim), "WITH") {
		return "", fmt.Errorf("the claim statement changed shape; the batched twin cannot wrap it")
	}
	return strings.TrimSpace(claim[:i]) + ", claimed AS (" + claim[i:] + ")\n" +
		"SELECT array_agg(id) AS ids, array_agg(lease_token) AS tokens, array_agg('" + Holder + "-' || id) AS reqs, array_agg(''::text) AS payloads FROM claimed", nil
}
