package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/report"
)

// reportOptions are the flags of pooltop report, and the files it reads.
type reportOptions struct {
	out, title, from, to, svg string
	files                     []string
}

func (o *reportOptions) addFlags(c *cobra.Command, _ *globals) {
	f := c.Flags()
	f.StringVarP(&o.out, "output", "o", "", "the HTML `FILE` to write (default: the first recording's name with .html)")
	f.StringVar(&o.title, "title", "", "the page's title (default: the window's dates)")
	f.StringVar(&o.from, "from", "", "leave out the snapshots before this `TIME`: RFC 3339 (2026-12-05T14:03:00Z), or HH:MM[:SS] on the recording's first day")
	f.StringVar(&o.to, "to", "", "leave out the snapshots after this `TIME` (as --from)")
	f.StringVar(&o.svg, "svg", "", "also write each chart as an SVG file in `DIR` (made if missing), for a document or a README")
	c.Args = func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return errors.New("give the recording: pooltop report FILE -o incident.html (several files read as one: FILE.1 FILE)")
		}
		o.files = args
		return nil
	}
}

func (o *reportOptions) validate(*globals) error {
	if o.out == "" {
		o.out = strings.TrimSuffix(o.files[0], filepath.Ext(o.files[0])) + ".html"
	}
	for _, f := range o.files {
		if filepath.Clean(f) == filepath.Clean(o.out) {
			return usageError{fmt.Errorf("-o %s: that is a recording to read; give another file", o.out)}
		}
	}
	return nil
}

func newReportCmd(g *globals) *cobra.Command {
	return g.command(&reportOptions{}, &cobra.Command{
		Use:   "report FILE... -o incident.html",
		Short: "Turn a recording into one HTML page for a postmortem",
		Long: `Write a recording (--record, or the output of watch --headless --json) as
one self-contained HTML page: a summary of the window (peaks and when,
how long each alert was up, ids consumed, double finalizations, stale-token
rejections), the alert timeline with each alert's runbook line, the events,
and charts of the pool on one time axis (drag to zoom, hover for values).
The page needs no network: attach it to a ticket or a mail. A long
recording is drawn with its peaks kept, and the page says so. Nothing
connects to a database; no password is in a recording.

  pooltop report pool.ndjson -o incident.html
  pooltop report pool.ndjson.1 pool.ndjson --from 14:00 --to 14:30 --title "Pool drained, 5 Dec"
  pooltop report pool.ndjson --svg charts/     # also each chart as charts/pool-by-state.svg …`,
	})
}

func (o *reportOptions) run(_ context.Context, g *globals) error {
	r, err := o.write(func(w string) { fmt.Fprintln(g.stderr, "pooltop: "+w) })
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s: %d snapshots from %s to %s\n", o.out, r.Snapshots, r.From.Format(time.RFC3339), r.To.Format(time.RFC3339))
	if o.svg == "" {
		return nil
	}
	files, err := r.WriteSVG(o.svg)
	if err != nil {
		return fmt.Errorf("--svg %s: %w", o.svg, err)
	}
	fmt.Fprintf(g.stdout, "%s: %d charts as SVG\n", o.svg, len(files))
	return nil
}

// write reads the recordings and writes the page to o.out (through a
// temporary file, so that a page half written never replaces one);
// warnings (a last line cut short) go to warn.
func (o *reportOptions) write(warn func(string)) (*report.Report, error) {
	var header *collector.RecordingHeader
	var snaps []collector.Snapshot
	for _, name := range o.files {
		if err := o.read(warn, name, &header, &snaps); err != nil {
			return nil, err
		}
	}
	if len(snaps) == 0 {
		return nil, usageError{fmt.Errorf("no snapshot in %s: give a file written by --record or by watch --headless --json", strings.Join(o.files, ", "))}
	}
	from, err := reportTime("--from", o.from, snaps)
	if err != nil {
		return nil, err
	}
	to, err := reportTime("--to", o.to, snaps)
	if err != nil {
		return nil, err
	}
	if !from.IsZero() && !to.IsZero() && to.Before(from) {
		return nil, usageError{fmt.Errorf("--to %s is before --from %s", o.to, o.from)}
	}
	r, err := report.New(header, snaps, report.Options{Title: o.title, From: from, To: to})
	if err != nil {
		return nil, usageError{err}
	}
	f, err := os.CreateTemp(filepath.Dir(o.out), ".pooltop-report-*")
	if err != nil {
		return nil, fmt.Errorf("-o %s: %w: give a file in a directory you can write", o.out, errors.Unwrap(err))
	}
	defer os.Remove(f.Name())
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", o.out, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", o.out, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil { // a page to share, unlike a recording
		return nil, fmt.Errorf("write %s: %w", o.out, err)
	}
	if err := os.Rename(f.Name(), o.out); err != nil {
		return nil, fmt.Errorf("-o %s: %w", o.out, err)
	}
	return r, nil
}

// reportOf is the dashboard's key O: the report of the recording files
// (the older first), written beside the newest as its name with .html.
func reportOf(files ...string) func() (string, error) {
	return func() (string, error) {
		var have []string
		for _, f := range files {
			if _, err := os.Stat(f); err == nil {
				have = append(have, f)
			}
		}
		if len(have) == 0 {
			return "", errors.New("nothing is recorded: start with --record FILE to write a report from the dashboard")
		}
		last := have[len(have)-1]
		o := &reportOptions{files: have, out: strings.TrimSuffix(last, filepath.Ext(last)) + ".html"}
		if _, err := o.write(func(string) {}); err != nil {
			return "", err
		}
		return o.out, nil
	}
}

// read appends one file's snapshots; a file of another pool than those
// before it is refused, a last line cut short is dropped with a warning.
func (o *reportOptions) read(warn func(string), name string, header **collector.RecordingHeader, snaps *[]collector.Snapshot) error {
	f, err := os.Open(name)
	if err != nil {
		return usageError{fmt.Errorf("report: %w: give a file written by --record or by watch --headless --json", err)}
	}
	defer f.Close()
	var mismatch error
	err = collector.ScanRecordingWarn(f, name, func(h collector.RecordingHeader) {
		if *header == nil {
			*header = &h
			return
		}
		if s, t := (*header).Source, h.Source; s.Host != t.Host || s.Database != t.Database || s.Table != t.Table {
			mismatch = fmt.Errorf("%s records %s@%s/%s table %s, the files before it %s@%s/%s table %s: report one pool at a time",
				name, t.User, t.Host, t.Database, t.Table, s.User, s.Host, s.Database, s.Table)
		}
	}, func(s collector.Snapshot, _ []byte) error {
		if mismatch != nil {
			return mismatch
		}
		*snaps = append(*snaps, s)
		return nil
	}, func(line int) {
		warn(fmt.Sprintf("%s line %d is cut short (pooltop stopped while writing it): left out, the rest reported", name, line))
	})
	if err == nil {
		err = mismatch
	}
	if err != nil {
		return usageError{err}
	}
	return nil
}

// reportTime parses --from or --to: RFC 3339, or HH:MM[:SS] on the day
// (and in the time zone) of the first snapshot.
func reportTime(flag, s string, snaps []collector.Snapshot) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	first := snaps[0].Time
	for _, s2 := range snaps {
		if s2.Time.Before(first) {
			first = s2.Time
		}
	}
	for _, layout := range []string{"15:04:05", "15:04"} {
		if t, err := time.ParseInLocation(layout, s, first.Location()); err == nil {
			y, m, d := first.Date()
			return time.Date(y, m, d, t.Hour(), t.Minute(), t.Second(), 0, first.Location()), nil
		}
	}
	return time.Time{}, usageError{fmt.Errorf("%s %q: give RFC 3339 (2026-12-05T14:03:00Z) or HH:MM[:SS] on the recording's first day", flag, s)}
}
