package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// A URL password with a raw /, @, : or % makes the URL unparseable, or
// parses into a host, port or database made of pieces of it: no command
// prints any piece, whether the URL comes from --dsn or DATABASE_URL.
func TestCommandsNeverPrintAURLPassword(t *testing.T) {
	for _, pw := range []string{"Abxq/Cdzw+Efyv=", "Sexq@crzw:etyv/Pwku", "pcxq%zzSecret", "Secxq:ret99"} {
		dsn := "postgresql://bob:" + pw + "@127.0.0.1:1/app"
		pieces := strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune("/@:%=+", r) })
		for _, args := range [][]string{
			{"migrate", "--dsn", dsn},
			{"verify", "--dsn", dsn},
			{"watch", "--dsn", dsn, "--headless", "--count", "1"},
			{"doctor", "--dsn", dsn},
			{"lease", "show", "--id", "1", "--dsn", dsn},
		} {
			check := func(how string, r result) {
				t.Helper()
				if r.code == 0 {
					t.Fatalf("%s %s: exit 0 on a server that is not there", how, args[0])
				}
				for _, p := range pieces {
					if len(p) >= 3 && strings.Contains(r.stdout+r.stderr, p) {
						t.Fatalf("%s %s with password %q printed %q: %s", how, args[0], pw, p, r.stderr)
					}
				}
			}
			check("--dsn", pooltop(t, args...))
			t.Setenv("DATABASE_URL", dsn)
			env := append([]string(nil), args...)
			for i := range env {
				if env[i] == "--dsn" {
					env = append(env[:i], env[i+2:]...)
					break
				}
			}
			check("DATABASE_URL", pooltop(t, env...))
		}
	}
}

// replay prints a recording's query texts masked, whoever wrote it.
func TestReplayMasksQueryPasswords(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hostile.ndjson")
	rec := `{"time":"2026-01-02T03:04:06Z","waiters":[{"pid":7,"query":"CREATE USER app WITH ENCRYPTED PASSWORD E'hunter2\\'s3cret'"}],"blockers":[{"pid":8,"query":"SELECT dblink_connect('host=127.0.0.1 password=''dbl1nk-s3cret''')","blocks":[7]}]}` + "\n"
	if err := os.WriteFile(file, []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"replay", file, "--headless", "--json"}, {"replay", file, "--headless"}} {
		r := pooltop(t, args...).must(t)
		if strings.Contains(r.stdout+r.stderr, "s3cret") {
			t.Fatalf("%v printed a password: %s", args, r.stdout)
		}
	}
	r := pooltop(t, "replay", file, "--headless", "--json").must(t)
	if !strings.Contains(r.stdout, "dblink_connect") || !strings.Contains(r.stdout, "ENCRYPTED PASSWORD") {
		t.Fatalf("replay --json lost the queries: %s", r.stdout)
	}
}

// A letter whose lower case has another length (the Kelvin sign) before
// the password of a key=value string does not shift where it is masked.
func TestCommandsMaskAPasswordAfterTheKelvinSign(t *testing.T) {
	dsn := "application_name=\u212a\u212a\u212a\u212a\u212a\u212a host=127.0.0.1 port=bad user=bob password=Kelv1nS3cret"
	for _, args := range [][]string{{"migrate", "--dsn", dsn}, {"watch", "--dsn", dsn, "--headless", "--count", "1"}, {"verify", "--dsn", dsn}} {
		r := pooltop(t, args...)
		if r.code == 0 || strings.Contains(r.stdout+r.stderr, "S3cret") {
			t.Errorf("%s: exit %d, printed %s%s", args[0], r.code, r.stdout, r.stderr)
		}
	}
}

// A URL password with a line break, in a URL that does not parse, is not
// printed on the parse error.
func TestCommandsMaskAURLPasswordWithALineBreak(t *testing.T) {
	dsn := "postgresql://bob:Lineqz\nBreakqz@127.0.0.1:bad/app"
	for _, args := range [][]string{{"migrate", "--dsn", dsn}, {"watch", "--dsn", dsn, "--headless", "--count", "1"}, {"verify", "--dsn", dsn}} {
		r := pooltop(t, args...)
		if r.code == 0 || strings.Contains(r.stdout+r.stderr, "Lineqz") || strings.Contains(r.stdout+r.stderr, "Breakqz") {
			t.Errorf("%s: exit %d, printed %s%s", args[0], r.code, r.stdout, r.stderr)
		}
	}
}

// The passwords in the query texts of the sessions on the pool (PASSWORD
// literals with no space before them, or as N'…') are masked wherever
// watch shows them: the --json lines, the recording, and the dashboard.
func TestWatchMasksPasswordsInQueries(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed for the dashboard part (apt-get install tmux; .ci/run installs it)")
	}
	db := migrated(t, 20)
	schema := db[3]
	ctx := context.Background()
	// The blocker's last query and the waiter's carry a password each.
	holder := pgtest.PeerTx(t, ctx, schema)
	if _, err := holder.Exec(ctx, "/* ALTER ROLE app PASSWORD'Bl0ckerS3cret' */ UPDATE resource_pool SET updated_at = now() WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	done := waitingSession(t, ctx, schema, "UPDATE resource_pool SET updated_at = now() WHERE id = 1 /* ALTER ROLE app PASSWORD N'Wa1terS3cret' */")
	// Runs before the waiter's connection closes.
	t.Cleanup(func() {
		_ = holder.Rollback(ctx)
		<-done
	})
	secrets := []string{"Bl0ckerS3cret", "Wa1terS3cret"}

	dir := t.TempDir()
	file := filepath.Join(dir, "watch.ndjson")
	r := pooltop(t, append([]string{"watch", "--headless", "--json", "--count", "2", "--interval", "250ms", "--record", file}, db...)...).must(t)
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(r.stdout+r.stderr, s) || strings.Contains(string(raw), s) {
			t.Fatalf("%s is in the output or the recording:\n%s", s, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "PASSWORD'xxxxx'") || !strings.Contains(r.stdout, "PASSWORD N'xxxxx'") {
		t.Fatalf("the queries are not in the output:\n%s", r.stdout)
	}

	// The dashboard: the blocker's line shows its query, masked.
	tr := &tmuxRun{t: t, session: fmt.Sprintf("pooltop-mask-%d", os.Getpid()), dir: dir}
	tr.tmux("new-session", "-d", "-s", tr.session, "-x", "250", "-y", "50",
		fmt.Sprintf("%s watch %s 2>%s/stderr; echo $? > %s/exit", binary(t), strings.Join(quoteAll(db), " "), dir, dir))
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", tr.session).Run() })
	screen := tr.waitFor("/* ALTER ROLE app PASSWORD'xxxxx' */ UPDATE", 30*time.Second)
	for _, s := range secrets {
		if strings.Contains(screen, s) {
			t.Fatalf("%s is on the dashboard:\n%s", s, screen)
		}
	}
	tr.press("q")
	tr.exited(10 * time.Second)
}

// quoteAll quotes each argument for a shell.
func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}
