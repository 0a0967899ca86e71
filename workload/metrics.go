package workload

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pooltop-dev/pooltop/engine"
)

// counter names one of a shard's counters.
type counter int

const (
	cAcquireCalls counter = iota // successful claim statements
	cAcquired                    // ids claimed
	cCommitted                   // effects accepted
	cReleased                    // ids released (task failed, or clean stop)
	cRenewed                     // leases renewed
	cFenced                      // commits rejected by the fence (stale token or lost lease)
	cDouble                      // commits that wrote a second effect for an id
	cCrashes                     // workers that died holding leases
	cPauses                      // workers that froze
	cEmpty                       // claims that found the pool empty
	cLeaseLost                   // renewals refused: the lease was gone mid-task
	cCycles                      // cycles completed
	cTransferred                 // leases handed to a peer mid-task (token raised)
	cOldHolder                   // late commits of old holders after a transfer, rejected
	cPastExpiry                  // commits tried after the lease had expired in the database, the local clock saying it had not
	cAckLost                     // commits whose answer was lost, retried
	cReplayed                    // retries the ledger recognised by their request id: nothing written twice
	cDupFresh                    // retries with a fresh request id that wrote a second effect
	cDupStable                   // retries with the stable request id that wrote a second effect (must stay 0)
	cPassedOver                  // ids claimed above a free id the report held: claims that passed it over
	numCounters
)

// ErrorClass groups errors for the metrics.
type ErrorClass int

// Error classes.
const (
	ErrClassTimeout   ErrorClass = iota // statement or lock timeout, context deadline
	ErrClassConn                        // connection lost or refused
	ErrClassContended                   // optimistic claim lost every attempt
	ErrClassOther
	numErrClasses
)

var errClassNames = [numErrClasses]string{"timeout", "connection", "contended", "other"}

func classify(err error) ErrorClass {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, engine.ErrContended):
		return ErrClassContended
	case errors.As(err, &pgErr) && (pgErr.Code == "57014" || pgErr.Code == "55P03"):
		return ErrClassTimeout
	case pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded):
		return ErrClassTimeout
	case errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"):
		return ErrClassConn // connection exception; the server shut down or ended the session
	case errors.As(err, &pgErr):
		return ErrClassOther
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "conn closed") {
		return ErrClassConn
	}
	return ErrClassOther
}

// histogram bounds, in microseconds: 1µs to 10 minutes, 2 significant digits
// (1% resolution) keeps each histogram a few KiB.
const (
	histMin, histMax, histDigits = 1, 600_000_000, 2
)

// shard holds one worker's metrics. Only its worker writes it; readers take
// its mutex briefly for the histograms, so no lock is shared between workers.
type shard struct {
	c    [numCounters]atomic.Int64
	errs [numErrClasses]atomic.Int64

	mu      sync.Mutex
	acquire *hdrhistogram.Histogram
	cycle   *hdrhistogram.Histogram
	// recent holds the claim latencies of the last recentWindow, one
	// histogram a second; recentAt is the second its current one covers.
	recent   *hdrhistogram.WindowedHistogram
	recentAt int64
	_        [64]byte // keep neighbouring shards off this cache line
}

// recentWindow is how far back the recent claim latency looks: short, so
// that p99 follows a change of strategy within seconds.
const recentWindow = 5

func newShard() *shard {
	return &shard{
		acquire: hdrhistogram.New(histMin, histMax, histDigits),
		cycle:   hdrhistogram.New(histMin, histMax, histDigits),
		recent:  hdrhistogram.NewWindowed(recentWindow, histMin, histMax, histDigits),
	}
}

// rotate moves the recent window on to the second now falls in, dropping
// the seconds that fell out of it. The caller holds s.mu.
func (s *shard) rotate(now time.Time) {
	sec := now.Unix()
	for i := 0; s.recentAt < sec && i < recentWindow; i++ {
		s.recent.Rotate()
		s.recentAt++
	}
	s.recentAt = max(s.recentAt, sec)
}

func (s *shard) add(c counter, n int64) { s.c[c].Add(n) }

func (s *shard) fail(err error) { s.errs[classify(err)].Add(1) }

func (s *shard) observe(h **hdrhistogram.Histogram, d time.Duration) {
	s.observeAt(h, d, time.Now())
}

// observeAt records d as measured at now.
func (s *shard) observeAt(h **hdrhistogram.Histogram, d time.Duration, now time.Time) {
	us := d.Microseconds()
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	s.mu.Lock()
	_ = (*h).RecordValue(us)
	if *h == s.acquire {
		s.rotate(now)
		_ = s.recent.Current.RecordValue(us)
	}
	s.mu.Unlock()
}

// resetLatency empties the shard's histograms.
func (s *shard) resetLatency() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquire.Reset()
	s.cycle.Reset()
	for range recentWindow {
		s.recent.Rotate()
	}
}

// mergeInto adds this shard's figures to the totals.
func (s *shard) mergeInto(t *totals) {
	for i := range s.c {
		t.c[i] += s.c[i].Load()
	}
	for i := range s.errs {
		t.errs[i] += s.errs[i].Load()
	}
	s.mu.Lock()
	t.acquire.Merge(s.acquire)
	t.cycle.Merge(s.cycle)
	s.rotate(time.Now())
	t.recent.Merge(s.recent.Merge())
	s.mu.Unlock()
}

// totals is a merge of shards.
type totals struct {
	c       [numCounters]int64
	errs    [numErrClasses]int64
	acquire *hdrhistogram.Histogram
	cycle   *hdrhistogram.Histogram
	recent  *hdrhistogram.Histogram // claims of the last recentWindow seconds
}

func newTotals() *totals {
	return &totals{
		acquire: hdrhistogram.New(histMin, histMax, histDigits),
		cycle:   hdrhistogram.New(histMin, histMax, histDigits),
		recent:  hdrhistogram.New(histMin, histMax, histDigits),
	}
}

// Latency is a set of percentiles in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

func latency(h *hdrhistogram.Histogram) Latency {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		P50: ms(h.ValueAtQuantile(50)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()),
	}
}

// Snapshot is the workload's metrics at one moment. Counters only grow
// until Reset; readers compute rates from two snapshots.
type Snapshot struct {
	Time                time.Time        `json:"time"`
	Workers             int              `json:"workers"`  // workers running now
	Stopping            int              `json:"stopping"` // workers told to stop, finishing their cycle
	AcquireCalls        int64            `json:"acquire_calls"`
	Acquired            int64            `json:"acquired"`
	Committed           int64            `json:"committed"`
	Released            int64            `json:"released"`
	Renewed             int64            `json:"renewed"`
	FencedRejections    int64            `json:"fenced_rejections"`
	DoubleFinalizations int64            `json:"double_finalizations"`
	Crashes             int64            `json:"crashes"`
	Pauses              int64            `json:"pauses"`
	EmptyPool           int64            `json:"empty_pool"`
	LeasesLost          int64            `json:"leases_lost"`
	Cycles              int64            `json:"cycles"`
	Conflicts           int64            `json:"conflicts"` // optimistic version checks lost
	Errors              map[string]int64 `json:"errors"`
	AcquireLatency      Latency          `json:"acquire_latency"`
	// RecentAcquireLatency covers only the claims of the last 5 seconds,
	// so that it follows a change of strategy or load.
	RecentAcquireLatency Latency `json:"recent_acquire_latency"`
	CycleLatency         Latency `json:"cycle_latency"`
	// Leaked is the ground truth of leases held by crashed workers that
	// nobody released: the ids the reaper must bring back (or, without
	// leases, the ids that leaked).
	Leaked    int   `json:"leaked"`
	Reclaimed int64 `json:"reclaimed"`
	// ReaperMaxLag is the longest a reclaimed lease waited for the reaper
	// while nothing held its row; ReaperHeld counts the expired leases the
	// reaper passed over because their holder had the row locked.
	ReaperMaxLag time.Duration `json:"reaper_max_lag_ns"`
	ReaperHeld   int64         `json:"reaper_held"`
	Refilled     int64         `json:"refilled"`
	// The stories of transfer, local-clock and lost-ack.
	Transferred         int64 `json:"transferred"`
	OldHolderRejections int64 `json:"old_holder_rejections"`
	PastExpiry          int64 `json:"past_expiry"`
	AcksLost            int64 `json:"acks_lost"`
	Replayed            int64 `json:"replayed"`
	DuplicatesFreshID   int64 `json:"duplicates_fresh_id"`
	DuplicatesStableID  int64 `json:"duplicates_stable_id"`
	// DeadOldest is how long the oldest lease still held by a crashed
	// worker has been dead; RecoveryWait the longest a crashed worker's
	// lease had left to run when it died: its ids cannot come back sooner.
	DeadOldest   time.Duration `json:"dead_oldest_ns"`
	RecoveryWait time.Duration `json:"recovery_wait_ns"`
	// AutovacuumOff: the workload turned autovacuum off for the pool.
	AutovacuumOff bool `json:"autovacuum_off"`
	// Reports: transactions of the report (ShareHold) that held free ids
	// FOR SHARE; PassedOver: ids claimed above a free id it held, while
	// it held it (the starvation story).
	Reports    int64 `json:"reports"`
	PassedOver int64 `json:"passed_over"`
}
