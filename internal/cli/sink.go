// Where the snapshots go besides the screen: Prometheus metrics
// (--listen) and a recording (--record), both fed from the polls that feed
// the dashboard or the headless output, never from polls of their own.

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/bytesize"
	"github.com/pooltop-dev/pooltop/internal/prom"
	"github.com/pooltop-dev/pooltop/tui"
)

// sinkOptions are the flags --listen, --record and --record-max, shared by
// watch and the demo.
type sinkOptions struct {
	listen    string
	record    string
	recordMax bytesize.Size

	addr string // --listen as host:port, made by validate
	// perServer: the metrics are each server's, labelled server="s1"…
	// (a watch over several servers).
	perServer bool
}

const listenHelp = "serve Prometheus metrics at http://`ADDR`/metrics from the dashboard's own polls (no extra query per scrape); ADDR is host:port, or a port alone (9187, :9187) for 127.0.0.1 only: give 0.0.0.0:9187 to listen on every interface, port 0 for any free port"

func (o *sinkOptions) addFlags(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&o.listen, "listen", "", listenHelp)
	f.StringVar(&o.record, "record", "", "append every snapshot to `FILE` as NDJSON (the objects of --json, after a header line); replay it with pooltop replay FILE")
	o.recordMax = 64 << 20
	f.Var(&o.recordMax, "record-max", "with --record: when FILE reaches this size it is renamed FILE.1 (replacing the older FILE.1) and a new FILE begins (e.g. 500KiB, 64MiB, 1GiB)")
}

// report is the dashboard's key O: the report of --record's file so far
// (with FILE.1 before it when the recording has rotated).
func (o *sinkOptions) report() func() (string, error) {
	if o.record == "" {
		return reportOf()
	}
	return reportOf(o.record+".1", o.record)
}

func (o *sinkOptions) validate() error {
	if o.listen != "" {
		addr, err := listenAddr(o.listen)
		if err != nil {
			return usageError{err}
		}
		o.addr = addr
	}
	if o.recordMax < 4<<10 {
		return usageError{fmt.Errorf("--record-max %v: give at least 4KiB (e.g. 64MiB)", o.recordMax)}
	}
	return nil
}

// listenAddr is the address --listen names: a port alone, or a host left
// out (:9187), means loopback, so that metrics are not served to the
// network unless a host says so.
func listenAddr(s string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("--listen %q: %s: give a port (9187, for 127.0.0.1:9187), or host:port (0.0.0.0:9187 for every interface)", s, why)
	}
	host, port := "", s
	if _, err := strconv.Atoi(s); err != nil {
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return "", bad("not host:port")
		}
		host, port = h, p
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", bad("the port must be a number from 0 to 65535")
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// metricsServer serves /metrics until closed.
type metricsServer struct {
	exp  *prom.Exporter
	srv  *http.Server
	done chan struct{}
}

// serveMetrics binds --listen's address before anything else starts, so that a
// port in use is one line and an exit, not a dashboard that opens and
// closes. Without --listen it returns nil.
func (o *sinkOptions) serveMetrics(g *globals) (*metricsServer, error) {
	if o.addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("--listen %s: the address is already in use: choose another port, or stop what listens there", o.addr)
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return nil, fmt.Errorf("--listen %s: cannot listen (%v): give a local address such as 127.0.0.1:9187", o.addr, err)
	}
	m := &metricsServer{exp: prom.NewExporter(o.perServer), done: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.exp, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "pooltop: metrics at /metrics")
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(m.done)
		_ = m.srv.Serve(ln) // ends with http.ErrServerClosed at close
	}()
	fmt.Fprintf(g.stderr, "pooltop: metrics at http://%s/metrics\n", ln.Addr())
	return m, nil
}

// close stops the server and waits for it.
func (m *metricsServer) close() {
	if m == nil {
		return
	}
	_ = m.srv.Close()
	<-m.done
}

// poller is what polls: the collector, or the collector tapped.
type poller interface {
	Poll(ctx context.Context) (collector.Snapshot, error)
}

// tapped is the source as the dashboard and the headless loop poll it (a
// collector, or collector.Servers over several): each snapshot also goes
// to the metrics and the recording. Its other methods (Series, Events,
// Info) are the source's; source adds the collector's doctor.
type tapped struct {
	tui.Source
	g       *globals
	metrics *metricsServer
	rec     *collector.Recorder

	mu     sync.Mutex
	recErr error // the recording stopped on this error

	// afterFirst runs once the first poll has returned (the demo starts
	// its workers then: see demoOptions.run).
	afterFirst func()
	first      sync.Once
}

// tap opens --record (the header names src's server and table) and
// returns the source tapped; close ends the recording.
func (o *sinkOptions) tap(g *globals, col tui.Source, m *metricsServer, mode string, interval time.Duration) (*tapped, error) {
	t := &tapped{Source: col, g: g, metrics: m}
	if o.record != "" {
		rec, err := collector.NewRecorder(o.record, int64(o.recordMax), collector.RecordingHeader{
			Version: version(), Started: time.Now(), Mode: mode, IntervalS: interval.Seconds(), Source: col.Info()})
		if err != nil {
			return nil, fmt.Errorf("--record %s: %w: give a file in a directory you can write", o.record, errors.Unwrap(err))
		}
		t.rec = rec
	}
	return t, nil
}

// doctor is a source that can check its pool: one server's collector.
type doctor interface {
	Doctor(ctx context.Context, s collector.Snapshot) ([]collector.Check, error)
}

// doctoring is a tapped collector with its doctor, for the dashboard.
type doctoring struct {
	*tapped
	doctor
}

// source is t as the dashboard takes it: with the doctor where the source
// has one (not over several servers, where doctor is run per server).
func (t *tapped) source() tui.Source {
	if d, ok := t.Source.(doctor); ok {
		return doctoring{t, d}
	}
	return t
}

func (t *tapped) close() error {
	if t.rec == nil {
		return nil
	}
	return t.rec.Close()
}

// Poll polls, then hands the snapshot to the metrics and the recording. A
// recording that fails (a full disk) stops, and says so in the snapshot's
// limits rather than failing the poll.
func (t *tapped) Poll(ctx context.Context) (collector.Snapshot, error) {
	s, err := t.Source.Poll(ctx)
	if t.afterFirst != nil {
		t.first.Do(t.afterFirst)
	}
	if err != nil {
		if t.metrics != nil && ctx.Err() == nil {
			t.metrics.exp.ObserveError()
		}
		return s, err
	}
	if len(s.Servers) > 0 {
		s = redacted(t.g, s) // the dashboard shows the servers' errors and queries
	}
	if t.metrics != nil {
		t.metrics.exp.Observe(s)
	}
	if t.rec != nil {
		t.mu.Lock()
		if t.recErr == nil {
			line, err := snapshotJSON(t.g, s)
			if err == nil {
				err = t.rec.Write(line)
			}
			t.recErr = err
		}
		if t.recErr != nil {
			s.Limits = append(slices.Clip(s.Limits), "recording stopped: "+t.g.redact(t.recErr.Error()))
		}
		t.mu.Unlock()
	}
	return s, nil
}

// snapshotJSON is a snapshot's line of --json and of a recording: the
// snapshot with every password masked in the texts it carries from the
// server (the queries of the sessions, the limits and events), its
// servers' snapshots too.
func snapshotJSON(g *globals, s collector.Snapshot) ([]byte, error) {
	b, err := json.Marshal(redacted(g, s))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// redacted is s with every password masked in the texts it carries.
func redacted(g *globals, s collector.Snapshot) collector.Snapshot {
	r := g.redact
	s.Waiters = slices.Clone(s.Waiters)
	for i := range s.Waiters {
		s.Waiters[i].Query = r(s.Waiters[i].Query)
	}
	s.Blockers = slices.Clone(s.Blockers)
	for i := range s.Blockers {
		s.Blockers[i].Query = r(s.Blockers[i].Query)
	}
	s.Limits = slices.Clone(s.Limits)
	for i := range s.Limits {
		s.Limits[i] = r(s.Limits[i])
	}
	s.Events = slices.Clone(s.Events)
	for i := range s.Events {
		s.Events[i].Text = r(s.Events[i].Text)
	}
	s.Alerts = slices.Clone(s.Alerts)
	for i := range s.Alerts {
		s.Alerts[i].Message = r(s.Alerts[i].Message)
	}
	s.Servers = slices.Clone(s.Servers)
	for i := range s.Servers {
		v := &s.Servers[i]
		v.Error = r(v.Error)
		if v.Snapshot != nil {
			one := redacted(g, *v.Snapshot)
			v.Snapshot = &one
		}
	}
	return s
}
