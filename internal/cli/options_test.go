package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/workload"
)

// validated binds o's flags with their defaults, parses args into them and
// returns what validate makes of them. No database is involved: validate
// runs before anything is opened.
func validated(t *testing.T, o options, g *globals, args ...string) error {
	t.Helper()
	c := &cobra.Command{Use: "test"}
	o.addFlags(c, g)
	if err := c.ParseFlags(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return o.validate(g)
}

// optionsCase is one command line given to a command's validate: want is a
// word of the usage error it must return (the flag at fault, as a rule), or
// "" for a command line that validates.
type optionsCase struct {
	name string
	new  func() options
	g    globals
	args []string
	want string
}

func TestOptionsValidate(t *testing.T) {
	bench := func() options { return &benchOptions{} }
	chaos := func() options { return &chaosOptions{} }
	work := func() options { return &workOptions{} }
	demo := func() options { return &demoOptions{} }
	benchDB := globals{schema: "pooltop_bench"}
	chaosDB := globals{schema: "pooltop_chaos"}
	watched := globals{dsn: "postgres://pooltop@127.0.0.1:1/pool", schema: "public"}
	cases := []optionsCase{
		{"bench defaults", bench, benchDB, nil, ""},
		{"bench worker count zero", bench, benchDB, []string{"--workers", "0"}, "--workers"},
		{"bench worker count not a number", bench, benchDB, []string{"--workers", "1,x"}, "--workers"},
		{"bench worker count too high", bench, benchDB, []string{"--workers", "1,100000"}, "--workers"},
		{"bench unknown strategy", bench, benchDB, []string{"--strategies", "skip-locked,nope"}, `strategy "nope"`},
		{"bench duration too short", bench, benchDB, []string{"--duration", "500ms"}, "--duration"},
		{"bench negative warm-up", bench, benchDB, []string{"--warmup", "-1s"}, "--warmup"},
		{"bench rtt below a millisecond", bench, benchDB, []string{"--rtt", "500us"}, "--rtt"},
		{"bench rtt above a second", bench, benchDB, []string{"--rtt", "2s"}, "--rtt"},
		{"bench in a schema that is not a scratch one", bench, globals{schema: "public"}, nil, "--schema"},
		{"bench no connection", bench, benchDB, []string{"--max-conns", "0"}, "--max-conns"},
		{"bench batch zero", bench, benchDB, []string{"--batch", "0"}, "--batch"},
		{"bench batch too large", bench, benchDB, []string{"--batch", "100000000"}, "--batch"},
		{"bench first fault named first", bench, benchDB, []string{"--duration", "500ms", "--max-conns", "0"}, "--duration"},

		{"chaos defaults", chaos, chaosDB, nil, ""},
		{"chaos unknown scenario", chaos, chaosDB, []string{"--scenario", "nope"}, `scenario "nope"`},
		{"chaos duration too short", chaos, chaosDB, []string{"--duration", "1ms"}, "--duration"},
		{"chaos duration too long", chaos, chaosDB, []string{"--duration", "48h"}, "--duration"},
		{"chaos in a schema that is not a scratch one", chaos, globals{schema: "public"}, nil, "--schema"},
		{"chaos real faults", chaos, chaosDB, []string{"--faults", "kill,terminate,restart", "--processes", "3"}, ""},
		{"chaos unknown fault", chaos, chaosDB, []string{"--faults", "kill,flood"}, `fault "flood"`},
		{"chaos real faults on a named server", chaos, globals{schema: "pooltop_chaos", dsn: "postgres://x@127.0.0.1:1/db"}, []string{"--faults", "kill"}, "--dsn"},
		{"chaos real faults with simulated ones", chaos, chaosDB, []string{"--faults", "kill", "--crash-rate", "0.1"}, "--crash-rate"},
		{"chaos processes without faults", chaos, chaosDB, []string{"--processes", "3"}, "--processes"},
		{"chaos too many processes", chaos, chaosDB, []string{"--faults", "kill", "--processes", "100"}, "--processes"},
		{"chaos faults too often", chaos, chaosDB, []string{"--faults", "kill", "--fault-every", "1ms"}, "--fault-every"},
		{"work defaults", work, watched, nil, ""},
		{"work vacuum-off on a pool that may not be pooltop's", work, globals{dsn: "postgres://x@127.0.0.1:1/db", schema: "public"}, []string{"--scenario", "vacuum-off", "--allow-writes"}, "--allow-writes"},
		{"work vacuum-off on a pooltop pool", work, watched, []string{"--scenario", "vacuum-off"}, ""},
		{"demo vacuum-off on a pool that may not be pooltop's", demo, globals{dsn: "postgres://x@127.0.0.1:1/db", schema: "public"}, []string{"--scenario", "vacuum-off", "--allow-writes"}, "--allow-writes"},
		{"demo vacuum-off on the throwaway server", demo, globals{schema: "public"}, []string{"--scenario", "vacuum-off", "--allow-writes"}, ""},
		{"demo starvation on a pool that may not be pooltop's", demo, globals{dsn: "postgres://x@127.0.0.1:1/db", schema: "public"}, []string{"--scenario", "starvation", "--allow-writes"}, "--allow-writes"},
		{"work starvation on a pool that may not be pooltop's", work, globals{dsn: "postgres://x@127.0.0.1:1/db", schema: "public"}, []string{"--scenario", "starvation", "--allow-writes"}, "--allow-writes"},
		{"work without --dsn", work, globals{schema: "public"}, nil, "--dsn"},
		{"work knobs", work, watched, []string{"--task", "400ms", "--ttl", "5s", "--batch", "10", "--crash-rate", "0.1"}, ""},
		{"work bad ttl", work, watched, []string{"--ttl", "1ms"}, "ttl"},
		{"work bad heartbeat", work, watched, []string{"--heartbeat", "1ms"}, "--heartbeat"},
		{"work negative duration", work, watched, []string{"--duration", "-1s"}, "--duration"},
		{"work empty name", work, watched, []string{"--name", ""}, "--name"},
		{"bench empty pool", bench, benchDB, []string{"--pool-size", "0"}, "--pool-size"},
		{"bench pool too large", bench, benchDB, []string{"--pool-size", "99999999999999"}, "--pool-size"},
		{"chaos negative pool", chaos, chaosDB, []string{"--pool-size", "-1"}, "--pool-size"},
		{"chaos pool too large", chaos, chaosDB, []string{"--pool-size", "999999999999"}, "--pool-size"},
		{"chaos negative workers", chaos, chaosDB, []string{"--workers", "-5"}, "workers"},
		{"chaos crash rate above one", chaos, chaosDB, []string{"--crash-rate", "2"}, "crash rate"},
		{"chaos negative pause rate", chaos, chaosDB, []string{"--pause-rate", "-1"}, "pause rate"},

		{"verify defaults", func() options { return &verifyOptions{} }, globals{}, nil, ""},
		{"verify negative grace", func() options { return &verifyOptions{} }, globals{}, []string{"--grace", "-1s"}, "--grace"},

		{"seed without a count", func() options { return &seedOptions{} }, globals{}, nil, "--count"},
		{"seed too many", func() options { return &seedOptions{} }, globals{}, []string{"--count", "999999999999"}, "--count"},
		{"seed a count", func() options { return &seedOptions{} }, globals{}, []string{"--count", "10"}, ""},

		{"migrate an unsafe schema name", func() options { return &migrateOptions{} }, globals{dsn: watched.dsn, schema: "bad;name"}, nil, "--schema"},
		{"migrate a schema of PostgreSQL's", func() options { return &migrateOptions{} }, globals{dsn: watched.dsn, schema: "pg_catalog"}, nil, "--schema"},
		{"migrate", func() options { return &migrateOptions{} }, watched, []string{"--dry-run"}, ""},

		{"watch defaults", func() options { return &watchOptions{} }, watched, nil, ""},
		{"watch polls too often", func() options { return &watchOptions{} }, watched, []string{"--interval", "1ms"}, "--interval"},
		{"watch negative count", func() options { return &watchOptions{} }, watched, []string{"--count", "-1"}, "--count"},
		{"watch a table name with two dots", func() options { return &watchOptions{} }, watched, []string{"--table", "a.b.c"}, "--table"},
		{"watch a zero lock wait", func() options { return &watchOptions{} }, watched, []string{"--alert-lock-wait", "0"}, "--alert-lock-wait"},
		{"watch a dead ratio above one", func() options { return &watchOptions{} }, watched, []string{"--alert-dead-ratio", "2"}, "--alert-dead-ratio"},
		{"watch metrics on a port alone", func() options { return &watchOptions{} }, watched, []string{"--listen", "9187", "--record", "x.ndjson"}, ""},
		{"watch metrics on a host without a port", func() options { return &watchOptions{} }, watched, []string{"--listen", "localhost"}, "--listen"},
		{"watch metrics on a port out of range", func() options { return &watchOptions{} }, watched, []string{"--listen", ":70000"}, "--listen"},
		{"watch a recording bound below 4KiB", func() options { return &watchOptions{} }, watched, []string{"--record", "x", "--record-max", "1KiB"}, "--record-max"},
		{"watch a connections ratio of NaN", func() options { return &watchOptions{} }, watched, []string{"--alert-connections", "NaN"}, "--alert-connections"},

		{"demo defaults", func() options { return &demoOptions{} }, globals{}, nil, ""},
		{"demo negative pool", func() options { return &demoOptions{} }, globals{}, []string{"--pool-size", "-5"}, "--pool-size"},
		{"demo no connection", func() options { return &demoOptions{} }, globals{}, []string{"--max-conns", "0"}, "--max-conns"},
		{"demo unknown scenario", func() options { return &demoOptions{} }, globals{}, []string{"--scenario", "nope"}, `scenario "nope"`},
		{"demo negative workers", func() options { return &demoOptions{} }, globals{}, []string{"--workers", "-1"}, "workers"},
		{"demo polls too often", func() options { return &demoOptions{} }, globals{}, []string{"--interval", "1ms"}, "--interval"},
		{"demo metrics on a bad address", func() options { return &demoOptions{} }, globals{}, []string{"--listen", "a:b:c"}, "--listen"},
		{"demo records", func() options { return &demoOptions{} }, globals{}, []string{"--record", "demo.ndjson", "--record-max", "1MiB", "--listen", ":0"}, ""},
		{"demo negative reaper batch", func() options { return &demoOptions{} }, globals{}, []string{"--reaper-batch", "-1"}, "reaper batch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.g
			err := validated(t, c.new(), &g, c.args...)
			if c.want == "" {
				if err != nil {
					t.Fatalf("%q: %v, want no error", c.args, err)
				}
				return
			}
			var ue usageError
			if !errors.As(err, &ue) || exitCode(err) != exitUsage {
				t.Fatalf("%q: %v (%T), want a usage error", c.args, err, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%q: %q does not name %s", c.args, err, c.want)
			}
		})
	}
}

// validate leaves run what it parsed: the worker counts in order, and the
// batched mode at --batch.
func TestBenchValidateParsesTheLists(t *testing.T) {
	o := &benchOptions{}
	if err := validated(t, o, &globals{schema: "pooltop_bench"}, "--workers", " 4, 1 ", "--strategies", "skip-locked, batched", "--batch", "50"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.counts, []int{4, 1}) {
		t.Errorf("counts %v, want [4 1]", o.counts)
	}
	if len(o.modes) != 2 || o.modes[0].Name != "skip-locked" || o.modes[1].Batch != 50 || !o.modes[1].Batched {
		t.Errorf("modes %+v, want skip-locked then batched at 50", o.modes)
	}
}

// Only the flags given override the scenario's settings, and the pool
// defaults to the scenario's size.
func TestChaosOverridesOnlyTheFlagsGiven(t *testing.T) {
	o := &chaosOptions{}
	if err := validated(t, o, &globals{schema: "pooltop_chaos"}, "--scenario", "crash-with-lease", "--workers", "3"); err != nil {
		t.Fatal(err)
	}
	sc, err := workload.ScenarioByName("crash-with-lease")
	if err != nil {
		t.Fatal(err)
	}
	if o.poolSize != sc.PoolSize {
		t.Errorf("pool size %d, want the scenario's %d", o.poolSize, sc.PoolSize)
	}
	cfg := sc.Config(1)
	want := cfg
	want.Workers = 3
	o.override(&cfg)
	if cfg != want {
		t.Errorf("override made %+v, want %+v", cfg, want)
	}
}
