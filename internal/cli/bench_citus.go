package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/servercost"
	"github.com/pooltop-dev/pooltop/workload"
)

// citusBenchRow is one row of bench --citus: a mode at a worker count on
// one side, a PostgreSQL server or a Citus cluster.
type citusBenchRow struct {
	// Engine is "postgresql", "citus" (every call through the coordinator)
	// or "citus-to-nodes" (each lease call sent to the node of its shard).
	Engine string `json:"engine"`
	workload.BenchResult
	// Nodes names the side's servers: the server, or the coordinator and
	// the workers.
	Nodes []string `json:"nodes"`
	// ServerCPU is each node's CPU over the window, in cores.
	ServerCPU []float64 `json:"server_cpu_cores"`
	// ServerCPUPerCycleUS is all the nodes' CPU per cycle, microseconds.
	ServerCPUPerCycleUS float64 `json:"server_cpu_us_per_cycle"`
	// ClientCPU is pooltop's own CPU over the window, in cores.
	ClientCPU float64 `json:"client_cpu_cores"`
}

// runCitus measures each mode at each worker count on a throwaway server,
// then on a throwaway Citus cluster, through the coordinator and sent to
// the nodes, one after the other on this machine.
func (o *benchOptions) runCitus(ctx context.Context, g *globals) error {
	var rows []citusBenchRow
	srvs, err := startServers(ctx, g, 1, 0, nil)
	if err != nil {
		return err
	}
	r, err := o.measureCitusSide(ctx, g, "postgresql", srvs[0].DSN(), []string{srvs[0].DSN()})
	_ = srvs[0].Stop()
	rows = append(rows, r...)
	if err != nil {
		return err
	}
	cluster, err := startCitus(ctx, g, nil)
	if err != nil {
		return err
	}
	defer func() { _ = cluster.Stop() }()
	nodes := []string{cluster.DSN()}
	for _, w := range cluster.Workers {
		nodes = append(nodes, w.DSN())
	}
	for _, side := range []string{"citus", "citus-to-nodes"} {
		r, err = o.measureCitusSide(ctx, g, side, cluster.DSN(), nodes)
		rows = append(rows, r...)
		if err != nil {
			return err
		}
	}
	if err := g.emit(rows, func(w io.Writer) error { return printCitusBench(w, rows) }); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Invalid != "" {
			return fmt.Errorf("no figure for %s at %d workers on %s: %s", r.Strategy, r.Workers, r.Engine, r.Invalid)
		}
	}
	return nil
}

// measureCitusSide runs every mode at every worker count on the pool of dsn
// (migrated there), reading the CPU of each of nodes.
func (o *benchOptions) measureCitusSide(ctx context.Context, g *globals, side, dsn string, nodes []string) ([]citusBenchRow, error) {
	maxConns := int32(min(slices.Max(o.counts), o.maxConns))
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: dsn, From: "--citus", Schema: g.schema, AppName: "pooltop-bench", MaxConns: maxConns, RTT: o.rtt})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	eng := engine.New(pool)
	if side == "citus-to-nodes" {
		defer eng.RouteToNodes(engine.ConnOptions{DSN: dsn, From: "--citus", Schema: g.schema, AppName: "pooltop-bench", MaxConns: maxConns, RTT: o.rtt})()
	}
	if _, err := eng.Seed(ctx, o.poolSize); err != nil {
		return nil, err
	}
	var samplers []*servercost.Sampler
	var names []string
	for _, n := range nodes {
		sm, err := servercost.Open(ctx, n, false)
		if err != nil {
			return nil, err
		}
		defer sm.Close()
		samplers, names = append(samplers, sm), append(names, serverAddr(n))
	}
	var rows []citusBenchRow
	for _, workers := range o.counts {
		for _, m := range o.modes {
			row := citusBenchRow{Engine: side, Nodes: names}
			before := make([]servercost.Sample, len(samplers))
			var t0 time.Time
			var self0 time.Duration
			w := workload.BenchWindow{
				AfterWarmup: func(ctx context.Context, rate float64, dry bool) error {
					need := int(rate*(o.duration.Seconds()+1)*1.5) + 10_000
					if dry {
						need = max(need, 4*o.poolSize)
					}
					_, err := eng.Refill(ctx, min(need, engine.MaxSeed))
					return err
				},
				Begin: func(ctx context.Context) error {
					for i, sm := range samplers {
						x, err := sm.Take(ctx)
						if err != nil {
							return err
						}
						before[i] = x
					}
					t0, self0 = time.Now(), servercost.SelfCPU()
					return nil
				},
				End: func(ctx context.Context) error {
					el := time.Since(t0).Seconds()
					row.ClientCPU = (servercost.SelfCPU() - self0).Seconds() / el
					total := 0.0
					for i, sm := range samplers {
						x, err := sm.Take(ctx)
						if err != nil {
							return err
						}
						c := (x.ServerCPU - before[i].ServerCPU).Seconds() / el
						row.ServerCPU = append(row.ServerCPU, c)
						total += c
					}
					row.ServerCPUPerCycleUS = total * 1e6 // per second, divided by the cycles below
					return nil
				},
			}
			r, err := workload.BenchRun(ctx, eng, m, workers, o.warmup, o.duration, w)
			if err != nil {
				return rows, err
			}
			switch {
			case r.EmptyPool > 0:
				r.Invalid = fmt.Sprintf("the pool ran dry %d times in the window: run again with a larger --pool-size", r.EmptyPool)
			case r.CyclesPerS == 0:
				r.Invalid = "no cycle completed in the window"
			default:
				row.ServerCPUPerCycleUS /= r.CyclesPerS
			}
			row.BenchResult = r
			fmt.Fprintf(g.stderr, "bench: %-10s %-12s %3d workers  %7.0f cycles/s  server CPU %s cores (%.0f µs a cycle)\n",
				side, m.Name, workers, r.CyclesPerS, cores(row.ServerCPU), row.ServerCPUPerCycleUS)
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func printCitusBench(w io.Writer, rows []citusBenchRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENGINE\tSTRATEGY\tWORKERS\tCYCLES/S\tP50 MS\tP99 MS\tSERVER CPU (CORES, BY NODE)\tSERVER µs/CYCLE\tPOOLTOP CPU\tERRORS")
	for _, r := range rows {
		if r.Invalid != "" {
			fmt.Fprintf(tw, "%s\t%s\t%d\tinvalid: %s\n", r.Engine, r.Strategy, r.Workers, r.Invalid)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.2f\t%.2f\t%s\t%.0f\t%.2f\t%d\n", r.Engine, r.Strategy, r.Workers, r.CyclesPerS,
			r.P50MS, r.P99MS, cores(r.ServerCPU), r.ServerCPUPerCycleUS, r.ClientCPU, r.Errors)
	}
	return tw.Flush()
}
