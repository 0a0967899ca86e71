package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
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

// watchServers is the source of a watch over several servers: each
// server's collector, named by its mark where it has one.
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
			return col, readMarkName(ctx, g, dsn), nil
		}}
	}
	return collector.NewServers(members, collector.ServersConfig{})
}

// readMarkName is the server's name in its pool's mark, "" where it has
// none or cannot be read.
func readMarkName(ctx context.Context, g *globals, dsn string) string {
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: dsn, From: "--dsn", Schema: g.schema, AppName: "pooltop-watch", MaxConns: 1})
	if err != nil {
		return ""
	}
	defer pool.Close()
	m, err := engine.New(pool).ReadMark(ctx)
	if err != nil {
		return ""
	}
	return m.Name
}

// markName is the server's name as watch and doctor show it: its mark, or
// its place in the list (#3) where it has none.
func markName(ctx context.Context, g *globals, dsn string, i int) string {
	if name := readMarkName(ctx, g, dsn); name != "" {
		return name
	}
	return "#" + strconv.Itoa(i+1)
}

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
