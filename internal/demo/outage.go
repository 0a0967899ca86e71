package demo

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
)

// Outage is the server of a demo over throwaway servers that the
// dashboard stops hard and starts again (its key S): claims go on at the
// other servers, its leases wait for it, and once it is back its reaper
// pass returns the expired ones.
type Outage struct {
	Name   string                          // its name in the pool (s3)
	Halt   func() error                    // stops it hard (pg_ctl stop -m immediate)
	Resume func(ctx context.Context) error // starts it again (crash recovery first)

	mu    sync.Mutex
	down  bool
	since time.Time
}

// OutageStage is a Stage whose dashboard can stop one server hard and
// start it again (tui.ServerFault).
type OutageStage struct {
	*Stage
	Outage *Outage
}

// ToggleServer stops the server when it runs and starts it again when
// stopped, and logs each as an event.
func (s OutageStage) ToggleServer() (string, error) {
	o := s.Outage
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down {
		if err := o.Halt(); err != nil {
			return "", fmt.Errorf("stop server %s: %w", o.Name, err)
		}
		o.down, o.since = true, time.Now()
		what := fmt.Sprintf("server %s stopped hard (immediate shutdown): claims go on at the others; S starts it again", o.Name)
		s.Collector.Note(collector.EventKnob, what)
		return what, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := o.Resume(ctx); err != nil {
		return "", fmt.Errorf("start server %s again: %w", o.Name, err)
	}
	o.down = false
	what := fmt.Sprintf("server %s started again after %v down (crash recovery): the reaper returns its expired leases", o.Name, time.Since(o.since).Round(100*time.Millisecond))
	s.Collector.Note(collector.EventKnob, what)
	return what, nil
}
