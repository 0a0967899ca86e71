package pgtest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/migrations"
)

// The Citus cluster of a test binary: a coordinator and two workers on
// loopback, started by the first test that asks for one and stopped after
// the last test (Run).
var citus struct {
	once    sync.Once
	cluster *pgembed.Cluster
	err     error
}

// CitusDSN is the connection string of the coordinator of the test binary's
// Citus cluster, started at the first call. Where Citus is not installed
// the test is skipped, unless CI or POOLTOP_REQUIRE_CITUS (which .ci/run
// sets after building Citus) is set: there it fails.
func CitusDSN(t testing.TB) string {
	t.Helper()
	citus.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Prepared transactions are left in pg_dist_transaction, not
		// recovered: the tests count them to prove a statement did not
		// commit in two phases.
		citus.cluster, citus.err = pgembed.StartCitus(ctx, pgembed.Options{Database: "pooltop_test",
			Settings: map[string]string{"citus.recover_2pc_interval": "-1"}}, 2)
	})
	if errors.Is(citus.err, pgembed.ErrNoCitus) && os.Getenv("POOLTOP_REQUIRE_CITUS") == "" && os.Getenv("CI") == "" {
		t.Skipf("%v: %s", citus.err, pgembed.CitusAdvice)
	}
	if citus.err != nil {
		t.Fatalf("pgtest: start a Citus cluster: %v", citus.err)
	}
	return citus.cluster.DSN()
}

// CitusCluster is the test binary's cluster, started as CitusDSN does.
func CitusCluster(t testing.TB) *pgembed.Cluster {
	t.Helper()
	CitusDSN(t)
	return citus.cluster
}

// CitusSchema creates an empty schema named after the test on the Citus
// coordinator (Citus creates it on the workers too) and drops it, with the
// distributed tables in it, at cleanup.
func CitusSchema(t testing.TB) string {
	t.Helper()
	coordinator := CitusDSN(t)
	schema := UniqueName("c_")
	quoted := pgx.Identifier{schema}.Sanitize()
	exec := func(sql string) error {
		conn, err := pgx.Connect(context.Background(), coordinator)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), sql)
		return err
	}
	if err := exec("CREATE SCHEMA " + quoted); err != nil {
		t.Fatalf("pgtest: create schema on Citus: %v", err)
	}
	t.Cleanup(func() {
		if err := exec("DROP SCHEMA " + quoted + " CASCADE"); err != nil {
			t.Errorf("pgtest: cleanup: %v", err)
		}
	})
	return schema
}

func stopCitus() {
	if citus.cluster != nil {
		_ = citus.cluster.Stop()
	}
}

// CitusEngine is an engine on a pool migrated on the test binary's Citus
// cluster, in a schema of the test's own, seeded with size ids; its pool
// is closed at cleanup. It returns the schema too.
func CitusEngine(t testing.TB, ctx context.Context, size int) (*engine.Engine, string) {
	t.Helper()
	schema := CitusSchema(t)
	cfg, err := pgx.ParseConfig(CitusDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, cfg, schema, migrations.Options{}); err != nil {
		t.Fatalf("pgtest: migrate on Citus: %v", err)
	}
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: CitusDSN(t), Schema: schema, AppName: schema, MaxConns: 8})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	e := engine.New(pool)
	if size > 0 {
		if _, err := e.Seed(ctx, size); err != nil {
			t.Fatalf("pgtest: seed on Citus: %v", err)
		}
	}
	return e, schema
}

// CitusConn opens one connection to the coordinator on schema, closed at
// cleanup.
func CitusConn(t testing.TB, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(CitusDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// OwnCitusCluster starts a cluster for the test alone (a coordinator and
// two workers, the pool migrated in public on the coordinator), for a test
// that stops its nodes; it is stopped at cleanup. It skips as CitusDSN does.
func OwnCitusCluster(t testing.TB, ctx context.Context) *pgembed.Cluster {
	t.Helper()
	CitusDSN(t)
	cluster, err := pgembed.StartCitus(ctx, pgembed.Options{Database: "pooltop_test"}, 2)
	if err != nil {
		t.Fatalf("pgtest: start a Citus cluster: %v", err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	cfg, err := pgx.ParseConfig(cluster.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, cfg, "public", migrations.Options{}); err != nil {
		t.Fatalf("pgtest: migrate on Citus: %v", err)
	}
	return cluster
}
