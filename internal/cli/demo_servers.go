package cli

import "errors"

// errServersGone is the answer to --servers, which placed a pool over
// several independent servers: Citus does that now.
var errServersGone = usageError{errors.New("--servers is gone: pooltop no longer places a pool over several servers of its own; past one machine the pool runs on Citus (--citus here starts a throwaway cluster; docs/citus.md)")}

// validateServers checks the demo's flags of where it runs: --citus, and
// the retired --servers.
func (o *demoOptions) validateServers(g *globals) error {
	switch {
	case o.servers != 0:
		return errServersGone
	case o.citus && g.dsn != "":
		return usageError{errors.New("--citus starts a throwaway Citus cluster of its own: drop --dsn (on a cluster of yours: pooltop migrate and pooltop work on its coordinator, pooltop watch to see it)")}
	case o.citus && o.partitions > 0:
		return usageError{errors.New("--citus spreads the pool over 32 shards of its own: drop --partitions")}
	}
	return nil
}
