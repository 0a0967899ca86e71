// Package startstop is the one life cycle of pooltop's long-running
// services (the reaper, the workload): Start runs the service's loop in the
// background and returns; Stop ends it and waits until it has; either may be
// called any number of times, in any order, from any goroutine; a stopped
// service starts again.
package startstop

import (
	"context"
	"sync"
)

// Runner holds a service's life cycle. The zero value is a stopped service.
type Runner struct {
	life   sync.Mutex // held across Start and the whole of Stop, so they never interleave
	mu     sync.Mutex // guards cancel and done, for Running
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs loop(ctx) in a goroutine of its own, unless it runs already.
// loop must return when ctx is done.
func (r *Runner) Start(ctx context.Context, loop func(ctx context.Context)) {
	r.life.Lock()
	defer r.life.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.cancel, r.done = cancel, done
	go func() {
		defer close(done)
		loop(ctx)
	}()
}

// Stop cancels the loop and waits for it to return. Stopping a stopped
// service does nothing.
func (r *Runner) Stop() {
	r.life.Lock()
	defer r.life.Unlock()
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	r.mu.Lock()
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
}

// Running reports whether the loop runs (or is being stopped).
func (r *Runner) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done != nil
}
