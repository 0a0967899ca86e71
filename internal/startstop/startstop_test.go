package startstop

import (
	"context"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/pooltop-dev/pooltop/internal/startstop/startstoptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Start and Stop from many goroutines, in any order, never run two loops
// at once, never leak one, and leave a service that starts again.
func TestStartStopStress(t *testing.T) {
	var r Runner
	r.Stop() // before any Start
	var running, most atomic.Int32
	loop := func(ctx context.Context) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-ctx.Done()
		running.Add(-1)
	}
	startstoptest.Stress(8, 200, func() { r.Start(context.Background(), loop) }, r.Stop)
	r.Stop()
	if most.Load() != 1 || running.Load() != 0 || r.Running() {
		t.Fatalf("at most %d loops at once (want 1), %d left running", most.Load(), running.Load())
	}
	r.Start(context.Background(), loop)
	if !r.Running() {
		t.Fatal("a stopped service did not start again")
	}
	r.Stop()
}
