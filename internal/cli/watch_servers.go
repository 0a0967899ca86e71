package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
)

// validateServers checks watch's flags for several servers: headless only,
// for now, and none of the flags that are one server's.
func (o *watchOptions) validateServers(g *globals) error {
	switch {
	case !o.headless:
		return usageError{errors.New("the dashboard shows one server for now: over several servers, watch runs with --headless (add --json for one object per poll, the sums and a row per server)")}
	case o.actions:
		return usageError{errors.New("--allow-actions acts on one server: give its --dsn alone")}
	case o.sink.listen != "" || o.sink.record != "":
		return usageError{errors.New("--listen and --record take one server for now: give its --dsn alone")}
	}
	for _, dsn := range g.servers {
		if _, err := o.config(g, dsn); err != nil {
			return err
		}
	}
	return o.sink.validate()
}

// watchedServer is one server of a headless watch over several: its
// collector, made again while the server does not answer.
type watchedServer struct {
	dsn, addr, name string
	col             *collector.Collector
	retryAt         time.Time
	lastErr         error
}

// open makes the server's collector and reads its name from its mark,
// when it answers; a server that does not is tried again 5 s later.
func (w *watchedServer) open(ctx context.Context, g *globals, o *watchOptions) {
	if w.col != nil || time.Now().Before(w.retryAt) {
		return
	}
	cfg, err := o.config(g, w.dsn)
	if err == nil {
		var col *collector.Collector
		if col, err = collector.New(ctx, cfg); err == nil {
			w.col = col
		}
	}
	if err != nil {
		w.lastErr, w.retryAt = err, time.Now().Add(5*time.Second)
		return
	}
	if w.name == w.addr {
		if pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: w.dsn, From: "--dsn", Schema: g.schema, AppName: "pooltop-watch", MaxConns: 1}); err == nil {
			if m, err := engine.New(pool).ReadMark(ctx); err == nil && m.Name != "" {
				w.name = m.Name
			}
			pool.Close()
		}
	}
}

// runServersHeadless polls every server at each interval, at once, and
// prints the sums with a row per server: a server that does not answer is
// shown as such while the others go on.
func (o *watchOptions) runServersHeadless(ctx context.Context, g *globals) error {
	servers := make([]*watchedServer, len(g.servers))
	for i, dsn := range g.servers {
		servers[i] = &watchedServer{dsn: dsn, addr: serverAddr(dsn), name: serverAddr(dsn)}
	}
	defer func() {
		for _, w := range servers {
			if w.col != nil {
				w.col.Close()
			}
		}
	}()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	answered := false
	for n := 0; o.count == 0 || n < o.count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		views := make([]collector.ServerView, len(servers))
		var wg sync.WaitGroup
		for i, w := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, o.interval+5*time.Second)
				defer cancel()
				w.open(pctx, g, o)
				v := collector.ServerView{Server: w.name, Addr: w.addr}
				if w.col != nil {
					s, err := w.col.Poll(pctx)
					if err == nil {
						v.Reachable, v.Snapshot = true, &s
					} else {
						w.lastErr = err
					}
				}
				if !v.Reachable && w.lastErr != nil {
					v.Error = oneLine(g.redact(w.lastErr.Error()))
				}
				views[i] = v
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return nil
		}
		m := collector.MergeServers(time.Now(), views)
		for _, v := range views {
			answered = answered || v.Reachable
		}
		if err := printSnapshot(g, m); err != nil || g.jsonOut {
			if err != nil {
				return err
			}
			continue
		}
		for _, v := range views {
			if !v.Reachable {
				fmt.Fprintf(g.stdout, "  %s %s: does not answer: %s\n", v.Server, v.Addr, v.Error)
				continue
			}
			s := v.Snapshot
			fmt.Fprintf(g.stdout, "  %s %s: unused %d pending %d expired %d consumed %d | lock waiters %d | dead %d | burn %.1f/s | poll %.1fms\n",
				v.Server, v.Addr, s.Pool.Unused, s.Pool.Pending, s.Pool.Expired, s.Pool.Consumed, s.LockWaiters, s.DeadTuples, s.BurnPerS, s.PollMS)
		}
	}
	if !answered {
		var why []string
		for _, w := range servers {
			if w.lastErr != nil {
				why = append(why, oneLine(g.redact(w.lastErr.Error())))
			}
		}
		return fmt.Errorf("no server answered: %s", strings.Join(why, "; "))
	}
	return nil
}
