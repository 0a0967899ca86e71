package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/termtext"
)

// leaseFlags are the flags of the lease subcommands.
type leaseFlags struct {
	holder, to, requestID, payload, strategy string
	ttl, grace                               time.Duration
	n, batch                                 int
	id, token                                int64
	noLease, noFence                         bool
}

func newLeaseCmd(g *globals) *cobra.Command {
	c := &leaseCLI{g: g, f: &leaseFlags{}}
	lease := &cobra.Command{
		Use:   "lease",
		Short: "Drive the lease engine by hand: acquire, renew, release, transfer, commit, reap, show, list",
		Long: `Drive the lease engine by hand. This is also how an on-call engineer frees
or hands over a stuck lease. Commands that write refuse a database without
the pooltop marker unless --allow-writes is given.

` + exitCodesHelp,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{fmt.Errorf("lease needs a subcommand (acquire, renew, release, transfer, commit, reap, show, list): see 'pooltop lease --help'")}
		},
	}
	lease.PersistentFlags().BoolVar(&g.jsonOut, "json", false, "print JSON")
	lease.PersistentFlags().BoolVar(&g.allowWrites, "allow-writes", false, "write even if the database lacks the pooltop marker")

	lease.AddCommand(c.acquireCmd(), c.renewCmd(), c.releaseCmd(), c.transferCmd(), c.commitCmd(), c.reapCmd(), c.showCmd(), c.listCmd())
	return lease
}

// leaseCLI is the lease command's state: the global flags and its own.
type leaseCLI struct {
	g *globals
	f *leaseFlags
}

// leaseAction is the work of a lease subcommand on the engine: its result,
// printed as JSON with --json, and the text shown otherwise.
type leaseAction func(ctx context.Context, e *engine.Engine) (result any, text func(w io.Writer) error, err error)

// leaseSub is what tells one lease subcommand from another: the flags it
// requires, any further check of them, whether it writes, and its action.
type leaseSub struct {
	required []string
	check    func(cmd *cobra.Command) error // after required; nil: none
	write    bool
	act      leaseAction
}

// command completes cmd into a lease subcommand: it checks the flags
// before the database is opened, then runs the action and prints its
// result.
func (c *leaseCLI) command(cmd *cobra.Command, s leaseSub) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := c.g.settleDSNs(cmd); err != nil {
			return err
		}
		if err := need(cmd, s.required...); err != nil {
			return err
		}
		if s.check != nil {
			if err := s.check(cmd); err != nil {
				return err
			}
		}
		d, err := c.g.open(cmd.Context(), openOptions{appName: "pooltop-lease", maxConns: 2, write: s.write, seedEmbedded: 1000})
		if err != nil {
			return err
		}
		defer d.Close()
		v, text, err := s.act(cmd.Context(), d.eng)
		if err != nil {
			return err
		}
		return c.g.emit(v, text)
	}
	return cmd
}

// leaseTable prints leases as a table.
func leaseTable(ls ...engine.Lease) func(w io.Writer) error {
	return func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tIDENTIFIER\tTOKEN\tHOLDER\tLEASED UNTIL")
		for _, l := range ls {
			until := "never (no lease)"
			if l.LeasedUntil != nil {
				until = l.LeasedUntil.UTC().Format(time.RFC3339Nano)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", l.ID, termtext.Escape(l.Identifier), l.Token, termtext.Escape(l.Holder), until)
		}
		return tw.Flush()
	}
}

// idTok adds the --id and --token flags.
func (c *leaseCLI) idTok(cmd *cobra.Command) {
	cmd.Flags().Int64Var(&c.f.id, "id", 0, "resource id (required)")
	cmd.Flags().Int64Var(&c.f.token, "token", -1, "fencing token of the lease (required)")
}

// need says which required flags are missing.
func need(c *cobra.Command, names ...string) error {
	for _, n := range names {
		if !c.Flags().Changed(n) {
			return usageError{fmt.Errorf("%s: --%s is required: see '%s --help'", c.CommandPath(), n, c.CommandPath())}
		}
	}
	return nil
}

// acquireCmd is pooltop lease acquire.
func (c *leaseCLI) acquireCmd() *cobra.Command {
	f := c.f
	var st engine.Strategy
	acquire := c.command(&cobra.Command{
		Use:   "acquire",
		Short: "Claim up to --n free ids for --holder under a --ttl lease",
	}, leaseSub{required: []string{"holder"}, write: true,
		check: func(cmd *cobra.Command) error {
			if !f.noLease {
				if err := need(cmd, "ttl"); err != nil {
					return err
				}
			}
			var err error
			if st, err = engine.ParseStrategy(f.strategy); err != nil {
				return usageError{err}
			}
			return nil
		},
		act: func(ctx context.Context, e *engine.Engine) (any, func(io.Writer) error, error) {
			ls, err := e.LeaseAcquire(ctx, &engine.LeaseAcquireParams{
				Holder: f.holder, TTL: f.ttl, N: f.n, Strategy: st, NoLease: f.noLease})
			return ls, leaseTable(ls...), err
		}})
	acquire.Flags().StringVar(&f.holder, "holder", "", "who holds the lease (required)")
	acquire.Flags().DurationVar(&f.ttl, "ttl", 0, "lease length, e.g. 30s (required; judged by the database clock)")
	acquire.Flags().IntVar(&f.n, "n", 1, fmt.Sprintf("how many ids to claim in one statement (1..%d)", engine.MaxBatch))
	acquire.Flags().StringVar(&f.strategy, "strategy", "skip-locked", "skip-locked, blocking or optimistic")
	acquire.Flags().BoolVar(&f.noLease, "no-lease", false, "claim without an expiry (the leak the reaper cannot fix)")
	return acquire
}

// renewCmd is pooltop lease renew.
func (c *leaseCLI) renewCmd() *cobra.Command {
	f := c.f
	renew := c.command(&cobra.Command{
		Use:   "renew",
		Short: "Extend a live lease by --ttl from now (the token does not change)",
	}, leaseSub{required: []string{"id", "token", "ttl"}, write: true,
		act: func(ctx context.Context, e *engine.Engine) (any, func(io.Writer) error, error) {
			l, err := e.LeaseRenew(ctx, &engine.LeaseRenewParams{ID: f.id, Token: f.token, TTL: f.ttl})
			return l, leaseTable(l), err
		}})
	c.idTok(renew)
	renew.Flags().DurationVar(&f.ttl, "ttl", 0, "new lease length from now (required)")
	return renew
}

// releaseCmd is pooltop lease release: one lease by --id and --token, or
// every lease of a --holder (a dead pod's ids) in batches.
func (c *leaseCLI) releaseCmd() *cobra.Command {
	f := c.f
	var expired, dryRun bool
	var batch int
	release := c.command(&cobra.Command{
		Use:   "release",
		Short: "Return a leased id to the pool, or every id of a --holder (tokens are bumped: the old ones are stale)",
		Long: `Return a leased id to the pool (--id and --token), or free every PENDING id
of one holder (--holder, e.g. a pod that died): in batches of --batch rows,
each a short statement that skips rows being changed right now. Every
released id gets a higher token, so the old holder's late commits are
rejected by the fence. --expired frees only its leases that have passed;
--dry-run counts what would be released and changes nothing.`,
	}, leaseSub{write: true,
		check: func(cmd *cobra.Command) error {
			if cmd.Flags().Changed("holder") {
				if cmd.Flags().Changed("id") || cmd.Flags().Changed("token") {
					return usageError{fmt.Errorf("%s: give --holder, or --id and --token, not both", cmd.CommandPath())}
				}
				if f.holder == "" {
					return usageError{fmt.Errorf("%s: --holder is empty: name the holder whose ids to free (see pooltop lease list --by-holder)", cmd.CommandPath())}
				}
				return nil
			}
			if expired || dryRun {
				return usageError{fmt.Errorf("%s: --expired and --dry-run go with --holder", cmd.CommandPath())}
			}
			return need(cmd, "id", "token")
		},
		act: func(ctx context.Context, e *engine.Engine) (any, func(io.Writer) error, error) {
			if f.holder != "" {
				res, err := e.ReleaseHolder(ctx, engine.ReleaseHolderParams{Holder: f.holder, Expired: expired, DryRun: dryRun, Batch: batch})
				return res, func(w io.Writer) error {
					what := "PENDING ids"
					if expired {
						what = "expired leases"
					}
					if res.DryRun {
						fmt.Fprintf(w, "would release %d %s of %s (dry run: nothing changed)\n", res.Released, what, termtext.Escape(f.holder))
					} else {
						fmt.Fprintf(w, "released %d %s of %s; their tokens were raised, so its late commits are rejected\n", res.Released, what, termtext.Escape(f.holder))
					}
					return nil
				}, err
			}
			l, err := e.LeaseRelease(ctx, &engine.LeaseReleaseParams{ID: f.id, Token: f.token})
			v := map[string]any{"id": l.ID, "identifier": l.Identifier, "token": l.Token, "status": engine.StatusUnused}
			return v, func(w io.Writer) error {
				fmt.Fprintf(w, "released id %d (%s); it is UNUSED at token %d\n", l.ID, termtext.Escape(l.Identifier), l.Token)
				return nil
			}, err
		}})
	c.idTok(release)
	release.Flags().StringVar(&f.holder, "holder", "", "free every PENDING id of this holder instead of one --id")
	release.Flags().BoolVar(&expired, "expired", false, "with --holder: only its leases that have passed")
	release.Flags().BoolVar(&dryRun, "dry-run", false, "with --holder: count what would be released, change nothing")
	release.Flags().IntVar(&batch, "batch", 500, fmt.Sprintf("with --holder: rows per statement (1..%d)", engine.MaxBatch))
	return release
}

// listCmd is pooltop lease list.
func (c *leaseCLI) listCmd() *cobra.Command {
	f := c.f
	var byHolder, expired bool
	var limit int
	list := c.command(&cobra.Command{
		Use:   "list",
		Short: "List PENDING rows (--holder, --expired), or who holds them (--by-holder)",
		Long: `List the PENDING rows, the longest expired first (never leased last), or with
--by-holder each holder's PENDING ids, expired leases and the age of its
longest-held row, most held first: which pod sits on the ids. It reads the
PENDING rows only (through the partial index on them where there is one),
so its cost is that of the PENDING rows, not of the table.`,
	}, leaseSub{
		check: func(cmd *cobra.Command) error {
			if limit < 1 || limit > engine.MaxSeed {
				return usageError{fmt.Errorf("--limit %d: between 1 and %d", limit, engine.MaxSeed)}
			}
			if byHolder && (cmd.Flags().Changed("holder") || expired) {
				return usageError{fmt.Errorf("%s: --by-holder lists every holder; --holder and --expired select rows", cmd.CommandPath())}
			}
			return nil
		},
		act: func(ctx context.Context, e *engine.Engine) (any, func(io.Writer) error, error) {
			if byHolder {
				hs, err := e.Holders(ctx, limit)
				return hs, func(w io.Writer) error {
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "HOLDER\tPENDING\tEXPIRED\tOLDEST")
					for _, h := range hs {
						name := termtext.Escape(h.Holder)
						if h.Holder == "" {
							name = "(no holder)"
						}
						fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", name, h.Pending, h.Expired, (time.Duration(h.OldestS) * time.Second).String())
					}
					return tw.Flush()
				}, err
			}
			rows, err := e.List(ctx, engine.ListParams{Holder: f.holder, Expired: expired, Limit: limit})
			ls := make([]engine.Lease, len(rows))
			for i, r := range rows {
				ls[i] = engine.Lease{ID: r.ID, Identifier: r.Identifier, Token: r.Token, LeasedUntil: r.LeasedUntil}
				if r.Holder != nil {
					ls[i].Holder = *r.Holder
				}
			}
			return rows, leaseTable(ls...), err
		}})
	list.Flags().BoolVar(&byHolder, "by-holder", false, "one line per holder: PENDING ids, expired leases, oldest")
	list.Flags().StringVar(&f.holder, "holder", "", "only this holder's rows")
	list.Flags().BoolVar(&expired, "expired", false, "only leases that have passed")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many lines")
	return list
}

// transferCmd is pooltop lease transfer.
func (c *leaseCLI) transferCmd() *cobra.Command {
	f := c.f
	transfer := c.command(&cobra.Command{
		Use:   "transfer",
		Short: "Hand a live lease to --to; the new holder gets a higher token",
	}, leaseSub{required: []string{"id", "token", "to"}, write: true,
		act: func(ctx context.Context, e *engine.Engine) (any, func(io.Writer) error, error) {
			l, err := e.LeaseTransfer(ctx, &engine.LeaseTransferParams{ID: f.id, Token: f.token, To: f.to, TTL: f.ttl})
			return l, leaseTable(l), err
		}})
	c.idTok(transfer)
	transfer.Flags().StringVar(&f.to, "to", "", "the new holder (required)")
	transfer.Flags().DurationVar(&f.ttl, "ttl", 0, "give the new holder a fresh lease of this length (default: keep the expiry)")
	return transfer
}

// commitCmd is pooltop lease commit.
func (c *leaseCLI) commitCmd() *cobra.Command {
	f := c.f
	commit := c.command(&cobra.Command{
		Use:   "commit",
		Short: "Record the effect in business_ledger and consume the id, fenced on --token",
	}, leaseSub{required: []string{"id", "token", "request-id"}, write: true,
		act: func(ctx context.Context, e *engine.Engine) (any, func(io.Writer) error, error) {
			res, err := e.LeaseCommit(ctx, &engine.LeaseCommitParams{
				ID: f.id, Token: f.token, Holder: f.holder, RequestID: f.requestID, Payload: f.payload, NoFence: f.noFence})
			return res, func(w io.Writer) error {
				verb := "committed"
				if res.Replayed {
					verb = "already committed (replay, nothing written)"
				}
				fmt.Fprintf(w, "%s: id %d token %d request %q ledger row %d at %s\n", verb, res.ResourceID, res.Token,
					res.RequestID, res.LedgerID, res.CommittedAt.UTC().Format(time.RFC3339Nano))
				return nil
			}, err
		}})
	c.idTok(commit)
	commit.Flags().StringVar(&f.requestID, "request-id", "", "idempotency key of the effect (required)")
	commit.Flags().StringVar(&f.payload, "payload", "", "the effect's payload")
	commit.Flags().StringVar(&f.holder, "holder", "", "who commits (recorded in the ledger)")
	commit.Flags().BoolVar(&f.noFence, "no-fence", false, "skip the token check (the split-brain demo: never in production)")
	return commit
}

// reapCmd is pooltop lease reap.
func (c *leaseCLI) reapCmd() *cobra.Command {
	f := c.f
	reap := c.command(&cobra.Command{
		Use:   "reap",
		Short: "Return up to --batch expired leases to the pool, once",
	}, leaseSub{write: true,
		act: func(ctx context.Context, e *engine.Engine) (any, func(io.Writer) error, error) {
			res, err := e.LeaseReap(ctx, &engine.LeaseReapParams{Batch: f.batch, Grace: f.grace})
			return map[string]any{"reclaimed": res.Reclaimed}, func(w io.Writer) error {
				fmt.Fprintf(w, "reclaimed %d expired leases\n", res.Reclaimed)
				return nil
			}, err
		}})
	reap.Flags().IntVar(&f.batch, "batch", 1000, fmt.Sprintf("at most this many rows (1..%d)", engine.MaxBatch))
	reap.Flags().DurationVar(&f.grace, "grace", 0, "only leases expired for longer than this")
	return reap
}

// showCmd is pooltop lease show.
func (c *leaseCLI) showCmd() *cobra.Command {
	f := c.f
	show := c.command(&cobra.Command{
		Use:   "show",
		Short: "Print one row: status, token, holder, lease and number of effects",
	}, leaseSub{required: []string{"id"},
		act: func(ctx context.Context, e *engine.Engine) (any, func(io.Writer) error, error) {
			r, err := e.Show(ctx, f.id)
			return r, func(w io.Writer) error { return printRow(w, r) }, err
		}})
	show.Flags().Int64Var(&f.id, "id", 0, "resource id (required)")
	return show
}

// printRow prints one resource_pool row, a field a line.
func printRow(w io.Writer, r engine.Row) error {
	until, holder := "-", "-"
	if r.LeasedUntil != nil {
		until = r.LeasedUntil.UTC().Format(time.RFC3339Nano)
		if r.Expired {
			until += " (expired)"
		}
	} else if r.Status == engine.StatusPending {
		until = "never (no lease: only a person or a release frees it)"
	}
	if r.Holder != nil {
		holder = *r.Holder
	}
	updated := "-"
	if r.UpdatedAt != nil {
		updated = r.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%d\nidentifier\t%s\nstatus\t%s\ntoken\t%d\nholder\t%s\nleased until\t%s\nupdated at\t%s\neffects\t%d\n",
		r.ID, termtext.Escape(r.Identifier), termtext.Escape(r.Status), r.Token, termtext.Escape(holder), until, updated, r.Effects)
	if r.Note != "" {
		fmt.Fprintf(tw, "outside the contract\t%s\n", termtext.Escape(r.Note))
	}
	return tw.Flush()
}
