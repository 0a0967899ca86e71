package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/tui"
)

// replayOptions are the flags of pooltop replay, and the files it reads.
type replayOptions struct {
	headless bool
	files    []string
}

func (o *replayOptions) addFlags(c *cobra.Command, g *globals) {
	c.Flags().BoolVar(&o.headless, "headless", false, "print the snapshots instead of the dashboard")
	g.jsonFlag(c, "with --headless: the snapshots as recorded, one JSON object per line (as watch --headless --json printed them)")
	c.Args = func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return errors.New("give the recording: pooltop replay FILE (several files play one after the other: FILE.1 FILE)")
		}
		o.files = args
		return nil
	}
}

func (o *replayOptions) validate(*globals) error { return nil }

func newReplayCmd(g *globals) *cobra.Command {
	return g.command(&replayOptions{}, &cobra.Command{
		Use:   "replay FILE...",
		Short: "Replay a recording (--record, or watch --headless --json output) on the dashboard",
		Long: `Replay a recording made with --record (watch or the demo), or the output of
watch --headless --json, on the dashboard, with the panels, charts and
alerts as they were live. Several files play one after the other (a
rotated recording: FILE.1 FILE). Nothing connects to a database.

Keys: space play/pause, < > slower/faster (0.25x to 64x), ←/→ one snapshot
back/forward, [ ] one minute back/forward, home/end the start/end, g go to a
time (HH:MM:SS), h chart window (1 min, 15 min, 1 h), q quit.

  pooltop replay pool.ndjson
  pooltop replay pool.ndjson --headless --json | jq .pool.unused`,
	})
}

func (o *replayOptions) run(ctx context.Context, g *globals) error {
	headless := o.headless || !isTerminal()
	var rec collector.Recording
	n := 0
	// Headless, each snapshot is printed as it is read: memory stays flat
	// however long the recording.
	out := bufio.NewWriter(g.stdout)
	printOne := func(s collector.Snapshot, line []byte) error {
		n++
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if g.jsonOut {
			if _, err := out.Write(line); err != nil {
				return err
			}
			return out.WriteByte('\n')
		}
		_, err := fmt.Fprintln(out, snapshotText(g, s))
		return err
	}
	for _, name := range o.files {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("replay: %w: give a file written by --record or by watch --headless --json", err)
		}
		if headless {
			err = collector.ScanRecording(f, name, func(collector.RecordingHeader) {}, printOne)
		} else {
			err = collector.ReadRecording(&rec, f, name)
			n = len(rec.Snapshots)
		}
		f.Close()
		if errors.Is(err, context.Canceled) {
			return out.Flush()
		}
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	if n == 0 {
		return fmt.Errorf("replay: no snapshot in %v: give a file written by --record or by watch --headless --json", o.files)
	}
	if headless {
		return out.Flush()
	}
	rp, err := collector.NewReplay(rec, collector.DefaultHistory)
	if err != nil {
		return err
	}
	interval := time.Second
	if h := rec.Header; h != nil && h.IntervalS > 0 {
		interval = time.Duration(h.IntervalS * float64(time.Second))
	}
	return tui.Run(ctx, tui.Options{Source: rp, Replay: rp, Mode: "replay", Interval: interval, Color: useColor(), Report: reportOf(o.files...)})
}
