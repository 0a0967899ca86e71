package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Passwords are masked whole, however the connection string is broken, and
// a short password does not mask the words it is a piece of.
func TestRedactDSN(t *testing.T) {
	cases := []struct {
		in      string
		secrets []string
		keep    []string
	}{
		{`host=db user=alice password='head TAIL`, []string{"head", "TAIL"}, []string{"host=db", "user=alice"}},
		{`host=db password=head\ TAIL port=abc`, []string{"head", "TAIL"}, []string{"port=abc"}},
		{`host=db password = 'it\'s q' user=bob`, []string{"it", "s q"}, []string{"user=bob"}},
		{`PASSWORD=Sekr1t host=x`, []string{"Sekr1t"}, []string{"host=x"}},
		{`sslpassword=keypw password=pw2 host=x`, []string{"keypw", "pw2"}, []string{"host=x"}},
		{`postgres://carol:p@ss:w0rd@db.example:5432/app?sslmode=require`, []string{"p@ss", "w0rd"}, []string{"carol", "db.example:5432/app"}},
		{`postgres://carol:hunter2@[::1/db`, []string{"hunter2"}, []string{"carol"}},
		{`postgresql://u@h/db?password=qpw&sslmode=disable`, []string{"qpw"}, []string{"sslmode=disable"}},
		{`failed: cannot parse "postgres://eve:topsecret@h:bad/db": invalid port`, []string{"topsecret"}, []string{"invalid port"}},
		{`mypassword=notasecret`, nil, []string{"mypassword=notasecret"}},
		// A raw /, ?, #, : or @ in a URL password (base64 secrets) ends the
		// authority where a URL parser ends it; the password is masked whole.
		{`postgresql://bob:Ab/Cd+Ef=@127.0.0.1:5432/app`, []string{"Ab", "Cd+Ef="}, []string{"bob", "127.0.0.1:5432/app"}},
		{`(postgresql://bob:p@ss:w%rd/x@127.0.0.1:5432/app)`, []string{"p@ss", "w%rd", "rd/x"}, []string{"bob", "127.0.0.1:5432/app)"}},
		{`postgres://bob:a?b#c:d@127.0.0.1/db`, []string{"a?b", "b#c", "c:d"}, []string{"127.0.0.1/db"}},
		{`postgres://bob@127.0.0.1:5432/db?application_name=a@b`, nil, []string{"bob@127.0.0.1:5432/db"}},
		// A line break in a URL password, before or after an @ or a #;
		// after a URL with a path the next line is its own. Without a path
		// a host:port and a broken password cannot be told apart: masked.
		{"postgresql://bob:head\nTAIL@127.0.0.1:5432/app", []string{"head", "TAIL"}, []string{"bob:", "127.0.0.1:5432/app"}},
		{"postgresql://bob:@000\n0@127.0.0.1:5432/app", []string{"@000", "0@127"}, []string{"bob:", "127.0.0.1:5432/app"}},
		{"postgresql://bob:00#0\n0@127.0.0.1:5432/app", []string{"00#0"}, []string{"bob:", "127.0.0.1:5432/app"}},
		{"postgresql://bob:5432\nTAIL@127.0.0.1/app", []string{"5432", "TAIL"}, []string{"bob:", "127.0.0.1/app"}},
		{"postgresql://bob@127.0.0.1:5432/app\nmail carol@example", nil, []string{"127.0.0.1:5432/app", "carol@example"}},
		{"postgresql://127.0.0.1:5432\nmail carol@example", []string{"5432"}, []string{"127.0.0.1:", "example"}},
	}
	for _, c := range cases {
		out := RedactDSN(c.in)
		for _, s := range c.secrets {
			if strings.Contains(out, s) {
				t.Errorf("RedactDSN(%q) = %q: %q left", c.in, out, s)
			}
		}
		for _, k := range c.keep {
			if !strings.Contains(out, k) {
				t.Errorf("RedactDSN(%q) = %q: %q lost", c.in, out, k)
			}
		}
	}
}

func TestRedactShortPasswordKeepsOtherWords(t *testing.T) {
	got := Redact("connect to postgres@db failed for user pos, password pos rejected", "pos")
	if got != "connect to postgres@db failed for user xxxxx, password xxxxx rejected" {
		t.Fatalf("got %q", got)
	}
	if got := Redact("a long one: correct-horse-battery inside", "correct-horse-battery"); strings.Contains(got, "horse") {
		t.Fatalf("got %q", got)
	}
}

// A connection string pgx cannot parse gives one line naming its source,
// without any part of the password.
func TestParseErrorNeverEchoesThePassword(t *testing.T) {
	for _, dsn := range []string{
		`host=127.0.0.1 user=alice password='head TAIL`,
		`host=127.0.0.1 password=head\ TAIL port=abc`,
		`postgres://alice:head@TAIL@[::1/db`,
		`postgres://alice:headTAIL@localhost:notaport/db`,
		`postgresql://alice:head/TAIL=@127.0.0.1:5432/app`,
		`postgresql://alice:head@:TAIL/x@127.0.0.1:5432/app`,
		`postgresql://alice:head%TAIL/x@127.0.0.1:5432/app`,
		`postgresql://alice:head%zzTAIL@127.0.0.1:5432/app`,
		"postgresql://alice:head\nTAIL@127.0.0.1:bad/app",
		"postgresql://alice:head\r\nTAIL/x@127.0.0.1:5432/app",
	} {
		_, perr := pgx.ParseConfig(dsn)
		if perr == nil {
			t.Fatalf("%q parsed", dsn)
		}
		err := ParseError(dsn, "DATABASE_URL", perr)
		msg := err.Error()
		if strings.Contains(msg, "head") || strings.Contains(msg, "TAIL") || !strings.Contains(msg, "parse DATABASE_URL") || strings.Contains(msg, "\n") {
			t.Errorf("%q: %s", dsn, msg)
		}
		if !errors.Is(err, err) {
			t.Fatal("unreachable")
		}
	}
}

// Bad PG* variables are named as such, not as an empty --dsn.
func TestParseErrorFromThePGVariables(t *testing.T) {
	t.Setenv("PGPORT", "abc")
	t.Setenv("PGPASSWORD", "envsecret")
	_, perr := pgx.ParseConfig("")
	if perr == nil {
		t.Fatal("PGPORT=abc parsed")
	}
	msg := ParseError("", "--dsn", perr).Error()
	if !strings.Contains(msg, "PG* variables") || !strings.Contains(msg, "PGPORT=abc") || strings.Contains(msg, "envsecret") || strings.Contains(msg, "cannot parse ``") {
		t.Fatalf("%s", msg)
	}
}

// Query texts shown on the dashboard, in JSON and in recordings carry no
// password: PASSWORD literals of every quoting, and connection strings.
func TestMaskQuery(t *testing.T) {
	for _, c := range []struct{ in, secret, keep string }{
		{`ALTER ROLE app PASSWORD 'hunter2secret'`, "hunter2secret", "ALTER ROLE app PASSWORD '"},
		{`create user x with encrypted password 'it''s-s3cret' valid until 'infinity'`, "s3cret", "valid until 'infinity'"},
		{`ALTER ROLE app PASSWORD E'back\'sl4sh'`, "sl4sh", "ALTER ROLE app"},
		{`ALTER ROLE app PASSWORD $pw$dollar-s3cret$pw$ LOGIN`, "dollar-s3cret", "LOGIN"},
		{`ALTER ROLE app PASSWORD $$dollar-s3cret$$`, "dollar-s3cret", "ALTER ROLE"},
		{`ALTER ROLE app PASSWORD 'cut-short-s3cret`, "s3cret", "ALTER ROLE"},
		{`SELECT dblink_connect('host=db password=dbl1nk-s3cret dbname=x')`, "dbl1nk-s3cret", "dbname=x"},
		{`SELECT * FROM dblink('postgres://u:url-s3cret@db/x', 'select 1')`, "url-s3cret", "select 1"},
		{`UPDATE resource_pool SET holder = 'password' WHERE id = 1`, "", "holder = 'password' WHERE id = 1"},
		{`ALTER ROLE app PASSWORD NULL`, "", "PASSWORD NULL"},
		// No space, or comments, between the keyword and the literal; the
		// U&'…' and N'…' forms; a literal continued on the next line.
		{`ALTER ROLE app PASSWORD'n0space-s3cret'`, "n0space-s3cret", "ALTER ROLE app PASSWORD'"},
		{`ALTER ROLE app PASSWORD /* c */ 'comm3nt-s3cret' LOGIN`, "comm3nt-s3cret", "LOGIN"},
		{"ALTER ROLE app PASSWORD -- why\n'l1ne-s3cret'", "l1ne-s3cret", "-- why"},
		{`ALTER ROLE app PASSWORD U&'un1code-s3cret' UESCAPE '!'`, "un1code-s3cret", "UESCAPE '!'"},
		{`ALTER ROLE app PASSWORD N'nat10nal-s3cret'`, "nat10nal-s3cret", "ALTER ROLE app"},
		{"ALTER ROLE app PASSWORD 'part1-s3cret'\n  'part2-s3cret' LOGIN", "-s3cret", "LOGIN"},
		{`ALTER ROLE "password" PASSWORD 'qu0ted-s3cret'`, "qu0ted-s3cret", `ALTER ROLE "password"`},
		// A connection string inside a literal, its quotes doubled or
		// backslash-escaped as SQL wants them.
		{`SELECT dblink_connect('c', 'host=127.0.0.1 password = ''dbl-s3cret'' dbname=x')`, "dbl-s3cret", "dbname=x')"},
		{`SELECT dblink_connect(E'host=127.0.0.1 password=\'dbl4-s3cret\' dbname=x')`, "dbl4-s3cret", "dbname=x')"},
		{`CREATE SUBSCRIPTION s CONNECTION 'host=127.0.0.1 password=sub-s3cret' PUBLICATION p`, "sub-s3cret", "PUBLICATION p"},
		{`SELECT dblink('postgresql://bob@127.0.0.1/app?password=urlq-s3cret', 'select 1')`, "urlq-s3cret", "'select 1')"},
		{`SELECT 'don''t', $1, $$ password=d0llar-s3cret $$`, "d0llar-s3cret", "'don''t', $1"},
	} {
		got := MaskQuery(c.in)
		if c.secret != "" && strings.Contains(got, c.secret) || !strings.Contains(got, c.keep) {
			t.Errorf("MaskQuery(%q) = %q", c.in, got)
		}
	}
}

// A letter whose lower case is longer or shorter (the Kelvin sign, İ), or
// a byte that is not UTF-8, before the keyword does not shift where the
// password is looked for.
func TestMaskAfterLettersThatChangeLength(t *testing.T) {
	for _, before := range []string{"\u212a", "\u0130", "\xff", "\u212a\u212a\u212a\u212a"} {
		for _, c := range []struct{ in, secret string }{
			{before + " ALTER ROLE app PASSWORD 'shift-s3cret'", "shift-s3cret"},
			{before + " host=127.0.0.1 password=shift-s3cret", "shift-s3cret"},
		} {
			if got := MaskQuery(c.in); strings.Contains(got, c.secret) {
				t.Errorf("MaskQuery(%q) = %q", c.in, got)
			}
			if got := RedactDSN(c.in); strings.HasPrefix(c.in, before+" host") && strings.Contains(got, c.secret) {
				t.Errorf("RedactDSN(%q) = %q", c.in, got)
			}
		}
		dsn := "application_name=" + before + " host=127.0.0.1 password=shift-s3cret"
		if pw := passwordIn(dsn); pw != "shift-s3cret" {
			t.Errorf("passwordIn(%q) = %q", dsn, pw)
		}
	}
}

// A server's address never shows its password, nor the pieces a URL parser
// takes for the host or the database when the password holds an unescaped
// @, / or #.
func TestAddrHidesThePassword(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://bob:se@cr@t@127.0.0.1:5432/db":           "se@cr@t",
		"postgres://bob:se@cr/t@127.0.0.1:5432/db":           "se@cr/t",
		"postgres://bob:p:a@ss@127.0.0.1/db":                 "p:a@ss",
		"host=127.0.0.1 user=bob password=se@cr@t dbname=db": "se@cr@t",
		"postgres://bob:hunter2@db.example.com:5433/pool":    "hunter2",
	} {
		addr := Addr(dsn)
		for _, piece := range strings.FieldsFunc(want, func(r rune) bool { return strings.ContainsRune("@/:", r) }) {
			if strings.Contains(addr, piece) && !strings.Contains("bob@127.0.0.1:5432/db db.example.com:5433/pool", piece) {
				t.Errorf("Addr(%q) = %q: shows %q of the password", dsn, addr, piece)
			}
		}
		if !strings.HasPrefix(addr, "bob@") {
			t.Errorf("Addr(%q) = %q: want the user", dsn, addr)
		}
	}
	if got := Addr("postgres://bob:hunter2@db.example.com:5433/pool"); got != "bob@db.example.com:5433/pool" {
		t.Errorf("a plain URL: %q", got)
	}
}
