// Package startstoptest holds the stress every service of the startstop
// life cycle must bear in its tests.
package startstoptest

import "sync"

// Stress calls start and stop from goroutines goroutines at once, each
// alternating between them rounds times (half of them starting first), and
// returns when all are done. The caller then checks that no two loops ran
// at once and that the service stops and starts again.
func Stress(goroutines, rounds int, start, stop func()) {
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				if (i+g)%2 == 0 {
					start()
				} else {
					stop()
				}
			}
		})
	}
	wg.Wait()
}
