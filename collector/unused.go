package collector

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// unusedCounter keeps an exact count of UNUSED ids without ever counting the
// whole pool in one statement (on ten million rows that takes seconds and
// slows the workers). The id range is cut into fixed chunks; each poll
// recounts the chunk holding the lowest UNUSED id (where SKIP LOCKED claims
// in id order take their ids, and where reclaimed ids return) and a few
// others: first those never counted, then round-robin. Chunks below the
// lowest UNUSED id hold none by definition. The sum is exact for chunks
// counted this poll; the others are as old as their last count, and the
// figure is marked estimated while any is.
type unusedCounter struct {
	width  int64 // ids per chunk; 0 until the first poll saw the id range
	counts map[int64]int64
	at     map[int64]time.Time
	cursor int64
	head   int64 // chunk of the lowest UNUSED id at the last poll
	top    int64 // chunk of the highest id at the last poll
	per    int   // chunks counted per poll beyond the head
	polled bool  // a poll has counted before: deltas are meaningful
}

const (
	minChunk  = 8192
	maxChunks = 4096 // the id range is cut into about this many chunks
)

// init learns the id range before the first poll, so that the first poll
// already counts the right chunks.
func (u *unusedCounter) init(ctx context.Context, c *Collector) error {
	var head, top *int64
	err := c.pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT min(id) FROM %[1]s WHERE status = 'UNUSED'), (SELECT max(id) FROM %[1]s)`, c.t.qualified)).Scan(&head, &top)
	if err != nil || head == nil || top == nil {
		return err
	}
	u.width = max(minChunk, (*top-*head+1)/maxChunks+1)
	u.head, u.top = *head/u.width, *top/u.width
	return nil
}

// queue adds the counting query to the poll's batch, planned from what the
// previous poll saw, and returns the function that totals the counts once
// the batch has run and the current id range (head, top) is known.
func (u *unusedCounter) queue(b *pgx.Batch, c *Collector, s *Snapshot) func(head, top *int64) {
	if u.counts == nil {
		u.counts, u.at, u.per = map[int64]int64{}, map[int64]time.Time{}, 8
	}
	plan := map[int64]bool{}
	if u.width > 0 {
		plan[u.head] = true
		for k := u.head; k <= u.top && len(plan) < 1+u.per; k++ { // never counted first
			if _, ok := u.counts[k]; !ok {
				plan[k] = true
			}
		}
		for n := u.head; n <= u.top && len(plan) < 1+u.per; n++ { // then round-robin
			if u.cursor < u.head || u.cursor > u.top {
				u.cursor = u.head
			}
			plan[u.cursor] = true
			u.cursor++
		}
	}
	now := s.Time
	got := map[int64]int64{}
	ks := make([]int64, 0, len(plan))
	for k := range plan {
		ks = append(ks, k)
	}
	if len(ks) > 0 {
		// One statement for every chunk, each counted by a range scan of the
		// partial index on UNUSED ids.
		b.Queue(fmt.Sprintf(`
SELECT r.k, (SELECT count(*) FROM %s WHERE status = 'UNUSED' AND id >= r.k * $2::bigint AND id < (r.k + 1) * $2::bigint)
FROM unnest($1::bigint[]) AS r(k)`, c.t.qualified), ks, u.width).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k, n int64
				if err := rows.Scan(&k, &n); err != nil {
					return fmt.Errorf("unused ids: %w", err)
				}
				got[k] = n
			}
			return rows.Err()
		})
	}
	t0 := time.Now()
	return func(head, top *int64) {
		// Spend more chunks per poll when polls are cheap, fewer when not.
		if el := time.Since(t0); el < c.cfg.CountBudget && u.per < 64 {
			u.per *= 2
		} else if el > 2*c.cfg.CountBudget && u.per > 1 {
			u.per /= 2
		}
		if head == nil || top == nil {
			var had int64
			for _, n := range u.counts {
				had += n
			}
			s.Pool.unusedDelta, s.Pool.haveDelta = -had, u.polled
			u.counts, u.at, u.width, u.polled = nil, nil, 0, true
			s.Pool.Unused = 0
			return
		}
		if u.width == 0 {
			u.width = max(minChunk, (*top-*head+1)/maxChunks+1)
		}
		// The change since the previous poll, from what was counted: chunks
		// recounted now, new chunks above the old top, and chunks that fell
		// below the lowest UNUSED id (all their ids were taken). Chunks of the
		// first sweep, never counted before, add nothing.
		var delta int64
		prevTop := u.top
		for k, n := range got {
			if old, ok := u.counts[k]; ok {
				delta += n - old
			} else if u.polled && k > prevTop {
				delta += n // ids added above the old top (a refill)
			}
			u.counts[k], u.at[k] = n, now
		}
		h, t := *head/u.width, *top/u.width
		u.head, u.top = h, t
		for k, old := range u.counts {
			if k < h || k > t {
				if k < h {
					delta -= old
				}
				delete(u.counts, k)
				delete(u.at, k)
			}
		}
		s.Pool.unusedDelta, s.Pool.haveDelta = delta, u.polled
		u.polled = true
		// span is how many ids of chunk k lie in [head, top].
		span := func(k int64) int64 { return min((k+1)*u.width, *top+1) - max(k*u.width, *head) }
		var sum, seenSpan, seenSum, missingSpan int64
		oldest := now
		missing := false
		for k := h; k <= t; k++ {
			n, ok := u.counts[k]
			if !ok {
				missing, missingSpan = true, missingSpan+span(k)
				continue
			}
			sum += n
			if k != h {
				seenSpan, seenSum = seenSpan+span(k), seenSum+n
			}
			if u.at[k].Before(oldest) {
				oldest = u.at[k]
			}
		}
		if missing { // not swept once yet: chunks not counted are taken as dense as those that were
			density := 1.0
			if seenSpan > 0 {
				density = float64(seenSum) / float64(seenSpan)
			}
			sum += int64(density * float64(missingSpan))
			if s.Pool.Total > 0 { // never more than the statistics say the table holds
				sum = min(sum, max(s.Pool.Total-s.Pool.Pending, 0))
			}
		}
		s.Pool.Unused = sum
		s.Pool.UnusedAgeS = now.Sub(oldest).Seconds()
		if missing || oldest.Before(now) {
			s.Pool.Estimated = append(s.Pool.Estimated, "unused")
		}
	}
}
