package collector

import (
	"slices"
	"time"
)

// ServerView is one server of a watch over several: its snapshot, or why
// there is none this poll.
type ServerView struct {
	Server    string    `json:"server"` // its name in the pool (s1, s2, …), else its address
	Addr      string    `json:"addr"`   // user@host:port/database, never a password
	Reachable bool      `json:"reachable"`
	Error     string    `json:"error,omitempty"`
	Snapshot  *Snapshot `json:"snapshot,omitempty"`
}

// MergeServers adds the servers' snapshots up into the snapshot of the
// whole pool: counts, rates, dead tuples and connections are summed, the
// longest lock wait and the slowest poll kept, the time to empty computed
// from the sums, and each server's active alerts carried with its name.
// A server that did not answer adds nothing but its row. The views are
// kept in Servers.
func MergeServers(now time.Time, views []ServerView) Snapshot {
	m := Snapshot{Time: now, Servers: views, Alerts: []Alert{}}
	noLease := int64(0)
	noLeaseKnown := true
	for _, v := range views {
		s := v.Snapshot
		if !v.Reachable || s == nil {
			m.Alerts = append(m.Alerts, Alert{Name: "server_unreachable", Active: true, Server: v.Server,
				Message: "server " + v.Server + " (" + v.Addr + ") does not answer: " + v.Error})
			continue
		}
		p := &m.Pool
		p.Unused += s.Pool.Unused
		p.Pending += s.Pool.Pending
		p.Expired += s.Pool.Expired
		p.Consumed += s.Pool.Consumed
		p.Stuck += s.Pool.Stuck
		p.ExpiredOld += s.Pool.ExpiredOld
		p.Total += s.Pool.Total
		p.UnusedAgeS = max(p.UnusedAgeS, s.Pool.UnusedAgeS)
		p.PendingAgeS = max(p.PendingAgeS, s.Pool.PendingAgeS)
		if s.Pool.Counted != nil && (p.Counted == nil || *s.Pool.Counted < *p.Counted) {
			c := *s.Pool.Counted // the least of the servers': how far the whole is read
			p.Counted = &c
		}
		if s.Pool.NoLease != nil {
			noLease += *s.Pool.NoLease
		} else {
			noLeaseKnown = false
		}
		for _, e := range s.Pool.Estimated {
			if !slices.Contains(p.Estimated, e) {
				p.Estimated = append(p.Estimated, e)
			}
		}
		m.LockWaiters += s.LockWaiters
		m.LockWaitMaxMS = max(m.LockWaitMaxMS, s.LockWaitMaxMS)
		m.DeadTuples += s.DeadTuples
		m.LiveTuples += s.LiveTuples
		m.Connections += s.Connections
		m.MaxConnections += s.MaxConnections
		m.ConsumedPerS += s.ConsumedPerS
		m.BurnPerS += s.BurnPerS
		m.PollMS = max(m.PollMS, s.PollMS)
		for _, a := range s.Alerts {
			if a.Active {
				a.Server = v.Server
				a.Message = "server " + v.Server + ": " + a.Message
				m.Alerts = append(m.Alerts, a)
			}
		}
	}
	if noLeaseKnown {
		m.Pool.NoLease = &noLease
	}
	if m.DeadTuples+m.LiveTuples > 0 {
		m.DeadRatio = float64(m.DeadTuples) / float64(m.DeadTuples+m.LiveTuples)
	}
	if m.BurnPerS > 0 {
		eta := float64(m.Pool.Unused) / m.BurnPerS
		m.DepletionETAS = &eta
	}
	return m
}
