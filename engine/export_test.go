package engine

// SQL of the claim and the fenced commit, for the benchmark that runs the
// same statements through pgbench.
const (
	SQLAcquireSkipLocked = sqlAcquireSkipLocked
	SQLCommitFenced      = sqlCommitFenced
)
