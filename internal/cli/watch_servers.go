package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/pooltop-dev/pooltop/collector"
)

// validateServers checks watch's flags for several servers: each server's
// configuration, and none of the flags that act on one server.
func (o *watchOptions) validateServers(g *globals) error {
	if o.actions {
		return usageError{errors.New("--allow-actions acts on one server: give its --dsn alone")}
	}
	for _, dsn := range g.servers {
		if _, err := o.config(g, dsn); err != nil {
			return err
		}
	}
	o.sink.perServer = true
	return o.sink.validate()
}

// watchServers is the source of a watch over several pools: each one's
// collector, named by its place in the list (#1, #2 …).
func (o *watchOptions) watchServers(g *globals) *collector.Servers {
	members := make([]collector.Member, len(g.servers))
	for i, dsn := range g.servers {
		members[i] = collector.Member{Addr: serverAddr(dsn), Open: func(ctx context.Context) (*collector.Collector, string, error) {
			cfg, err := o.config(g, dsn)
			if err != nil {
				return nil, "", err
			}
			col, err := collector.New(ctx, cfg)
			if err != nil {
				return nil, "", err
			}
			return col, "", nil
		}}
	}
	return collector.NewServers(members, collector.ServersConfig{})
}

// markName is the server's name as watch and doctor show it: its place in
// the list (#3).
func markName(_ context.Context, _ *globals, _ string, i int) string { return "#" + strconv.Itoa(i+1) }

// serverRows are the text lines of each server of a snapshot over several
// (its errors masked already: see redacted).
func serverRows(s collector.Snapshot) []string {
	var out []string
	for _, v := range s.Servers {
		if !v.Reachable {
			out = append(out, fmt.Sprintf("  %s %s: does not answer: %s", v.Server, v.Addr, v.Error))
			continue
		}
		p := v.Snapshot
		out = append(out, fmt.Sprintf("  %s %s: unused %d pending %d expired %d consumed %d | lock waiters %d | dead %d | burn %.1f/s | poll %.1fms",
			v.Server, v.Addr, p.Pool.Unused, p.Pool.Pending, p.Pool.Expired, p.Pool.Consumed, p.LockWaiters, p.DeadTuples, p.BurnPerS, p.PollMS))
	}
	return out
}
