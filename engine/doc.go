// Glossary. One name per concept, in the code, the JSON and on the screen.
//
//   - id: a row of resource_pool, a resource to hand out once. Its status is
//     UNUSED (free), PENDING (held) or CONSUMED (its effect is recorded).
//   - lease: the right to act on an id until leased_until, judged by the
//     database clock. A claim without a lease (NoLease) has no expiry.
//   - token (fencing token): lease_token, raised at every change of owner
//     (acquire, transfer, release, reap) and never lowered. A holder proves
//     its lease with it.
//   - fence: the check of the token in the statement that writes the effect
//     to business_ledger; a commit with an older token changes nothing.
//   - zombie: a holder that lost its lease (it paused, the reaper took the
//     id back) and still tries to commit; the fence rejects it.
//   - expired: PENDING with a lease that has passed; expired longer than a
//     reaper interval means the reaper lags.
//   - reclaim: the reaper returning expired leases to UNUSED, raising their
//     tokens.
//   - leaked: ids a crashed worker held that nobody has freed yet; with
//     leases the reaper reclaims them, without they stay PENDING for good
//     (chaos reports those left at the end as lost_ids).
//   - stuck: PENDING ids nothing will free: a lease expired longer than the
//     stuck threshold ago, or no lease and unchanged that long.
//   - hand-built pool: a resource_pool pooltop did not create, with only
//     the basic columns (id, identifier, status, leased_until, lease_token,
//     updated_at) and often a partial index on UNUSED ids alone; watch
//     reads one as it is, migrate adopts one only with --allow-writes.
//   - double finalization: an id with a second effect, possible only with
//     the fence off (or checked in the application before an unfenced
//     write, which is the same thing once a pause falls between them).
//   - transfer: handing a live lease to another holder; the token rises,
//     so the old holder's later commit is stale.
//   - request id (idempotency key): the unique key of an effect; a retried
//     commit with the same one is answered from the ledger (replayed), a
//     retry with a fresh one is a new effect (a duplicate, unless the fence
//     stops it).
//   - recovery: how long a crashed worker's ids wait to come back: at least
//     what its lease had left to run, plus the reaper's lag.
//
// (Kept apart from the package comment in engine.go, which says what the
// package does; this says what its words mean.)

package engine
