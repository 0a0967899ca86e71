package collector

import (
	"context"
	"fmt"
	"time"
)

// unusedCounter keeps an exact count of UNUSED ids without ever counting the
// whole pool in one statement (on ten million rows that takes seconds and
// slows the workers). The id range is cut into fixed chunks; each poll
// recounts the chunk holding the lowest UNUSED id (where SKIP LOCKED claims
// in id order take their ids, and where reclaimed ids return), chunks never
// counted, then the others round-robin, within a time budget. Chunks below
// the lowest UNUSED id hold none by definition. The sum is exact for chunks
// counted this poll; the others are as old as their last count, and the
// figure is marked estimated while any is.
type unusedCounter struct {
	width  int64
	counts map[int64]int64
	at     map[int64]time.Time
	cursor int64
}

const minChunk = 4096

func (u *unusedCounter) count(ctx context.Context, c *Collector, s *Snapshot) error {
	var head, top *int64
	err := c.pool.QueryRow(ctx, fmt.Sprintf(
		`SELECT (SELECT min(id) FROM %[1]s WHERE status = 'UNUSED'), (SELECT max(id) FROM %[1]s)`, c.t.qualified)).Scan(&head, &top)
	if err != nil {
		return fmt.Errorf("unused ids: %w", err)
	}
	if head == nil || top == nil {
		u.counts, u.at = nil, nil
		s.Pool.Unused = 0
		return nil
	}
	if u.counts == nil {
		u.counts, u.at = map[int64]int64{}, map[int64]time.Time{}
		u.width = max(minChunk, (*top-*head+1)/512+1)
	}
	h, t := *head/u.width, *top/u.width
	for k := range u.counts {
		if k < h || k > t {
			delete(u.counts, k)
			delete(u.at, k)
		}
	}
	now := time.Now()
	start := now
	counted := map[int64]bool{}
	countChunk := func(k int64) error {
		var n int64
		err := c.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE status = 'UNUSED' AND id >= $1 AND id < $2`, c.t.qualified),
			k*u.width, (k+1)*u.width).Scan(&n)
		if err != nil {
			return fmt.Errorf("unused ids: %w", err)
		}
		u.counts[k], u.at[k], counted[k] = n, now, true
		return nil
	}
	if err := countChunk(h); err != nil {
		return err
	}
	// Beyond the head, at least one chunk per poll, more while the budget lasts.
	budget := c.cfg.CountBudget
	more := func() bool { return len(counted) < 2 || time.Since(start) < budget }
	for k := h + 1; k <= t && more(); k++ { // never counted first
		if _, ok := u.counts[k]; !ok {
			if err := countChunk(k); err != nil {
				return err
			}
		}
	}
	for n := int64(0); n <= t-h && more(); n++ { // then round-robin
		if u.cursor < h || u.cursor > t {
			u.cursor = h
		}
		k := u.cursor
		u.cursor++
		if counted[k] {
			continue
		}
		if err := countChunk(k); err != nil {
			return err
		}
	}
	var sum, seen, seenSum int64
	oldest := now
	missing := int64(0)
	for k := h; k <= t; k++ {
		n, ok := u.counts[k]
		if !ok {
			missing++
			continue
		}
		sum += n
		if k != h {
			seen, seenSum = seen+1, seenSum+n
		}
		if u.at[k].Before(oldest) {
			oldest = u.at[k]
		}
	}
	if missing > 0 { // not swept once yet: chunks not counted are taken as dense as those that were
		avg := u.width
		if seen > 0 {
			avg = seenSum / seen
		}
		sum += missing * avg
	}
	s.Pool.Unused = sum
	s.Pool.UnusedAgeS = now.Sub(oldest).Seconds()
	s.Pool.ExactUnusedPoll = missing == 0 && !oldest.Before(now)
	if !s.Pool.ExactUnusedPoll {
		s.Pool.Estimated = append(s.Pool.Estimated, "unused")
	}
	return nil
}
