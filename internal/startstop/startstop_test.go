package startstop

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
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
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if (i+g)%2 == 0 {
					r.Start(context.Background(), loop)
				} else {
					r.Stop()
				}
			}
		}(g)
	}
	wg.Wait()
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
