package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
