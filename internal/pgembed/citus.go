package pgembed

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrNoCitus is returned (wrapped) by StartCitus when the PostgreSQL found
// by FindBinaries has no Citus extension installed.
var ErrNoCitus = errors.New("the Citus extension is not installed for this PostgreSQL")

// CitusAdvice says in one line how to get Citus for the tests and the demo.
const CitusAdvice = "build it from ../shared/citus with .ci/citus-build (as root), or install your distribution's citus package for this PostgreSQL"

// Cluster is a throwaway Citus cluster on loopback: a coordinator and its
// workers, each a Server started by Start with Citus preloaded, the
// extension created in the database and the workers added to the
// coordinator's metadata.
type Cluster struct {
	Coordinator *Server
	Workers     []*Server
}

// citusSettings are the server settings of every node. Statistics
// collection would call home; the nodes talk to each other in the clear
// over loopback (trust authentication, as Start's servers); prepared
// transactions are allowed for the statements Citus commits in two phases
// (DDL across nodes).
var citusSettings = map[string]string{
	"shared_preload_libraries":           "citus",
	"citus.enable_statistics_collection": "off",
	"citus.node_conninfo":                "sslmode=disable",
	"max_prepared_transactions":          "100",
}

// StartCitus starts a coordinator and workers (at least one) and joins
// them into one cluster. opts is used for every node; its Settings add to
// (and may override) the Citus settings. ctx bounds the whole startup. On
// error every node started is stopped and removed.
func StartCitus(ctx context.Context, opts Options, workers int) (*Cluster, error) {
	if workers < 1 {
		return nil, fmt.Errorf("pgembed: a Citus cluster needs at least one worker, not %d", workers)
	}
	settings := make(map[string]string, len(citusSettings)+len(opts.Settings))
	for k, v := range citusSettings {
		settings[k] = v
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	opts.Settings = settings
	c := &Cluster{}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	for i := 0; i <= workers; i++ {
		s, err := Start(ctx, opts)
		if err != nil {
			if strings.Contains(err.Error(), `could not access file "citus"`) {
				return nil, fmt.Errorf("pgembed: %w (%s)", ErrNoCitus, CitusAdvice)
			}
			return nil, err
		}
		if i == 0 {
			c.Coordinator = s
		} else {
			c.Workers = append(c.Workers, s)
		}
		if err := execOn(ctx, s, "CREATE EXTENSION IF NOT EXISTS citus"); err != nil {
			return nil, err
		}
	}
	conn, err := pgx.Connect(ctx, c.Coordinator.DSN())
	if err != nil {
		return nil, fmt.Errorf("pgembed: connecting to the coordinator: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT citus_set_coordinator_host('127.0.0.1', $1)", c.Coordinator.Port()); err != nil {
		return nil, fmt.Errorf("pgembed: citus_set_coordinator_host: %w", err)
	}
	for _, w := range c.Workers {
		if _, err := conn.Exec(ctx, "SELECT citus_add_node('127.0.0.1', $1)", w.Port()); err != nil {
			return nil, fmt.Errorf("pgembed: citus_add_node 127.0.0.1:%d: %w", w.Port(), err)
		}
	}
	ok = true
	return c, nil
}

// execOn runs one statement on s's database.
func execOn(ctx context.Context, s *Server, sql string) error {
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		return fmt.Errorf("pgembed: connecting to 127.0.0.1:%d: %w", s.Port(), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgembed: %s on 127.0.0.1:%d: %w", sql, s.Port(), err)
	}
	return nil
}

// DSN is the coordinator's connection URL: pooltop and its users talk to
// the cluster there.
func (c *Cluster) DSN() string { return c.Coordinator.DSN() }

// Stop stops every node (workers first) and removes their files; it
// returns the first error.
func (c *Cluster) Stop() error {
	var first error
	for i := len(c.Workers) - 1; i >= 0; i-- {
		if err := c.Workers[i].Stop(); err != nil && first == nil {
			first = err
		}
	}
	if c.Coordinator != nil {
		if err := c.Coordinator.Stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
