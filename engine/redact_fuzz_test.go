package engine

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var plainName = regexp.MustCompile(`^[A-Za-z0-9_]{1,20}$`)

// FuzzPasswordNeverPrinted puts a password into URL and key=value
// connection strings, raw and escaped, parses each as the commands do, and
// checks that no line pooltop builds from them (ParseError on a failure,
// ConnectError, RedactDSN) holds the password.
func FuzzPasswordNeverPrinted(f *testing.F) {
	for _, pw := range []string{"Ab/Cd+Ef=", "p@ss:w%rd/x", "a?b#c:d", "it's q", `back\slash`, "%zz%", "s p a c e", "::::@@@@", "héllo wörld", "line\nbreak", "cr\r@lf/x"} {
		f.Add(pw, "app")
	}
	f.Fuzz(func(t *testing.T, pw, db string) {
		if len(pw) < 6 || strings.Contains(pw, "\x00") || strings.TrimSpace(pw) != pw || strings.Contains(db, "\x00") {
			return // short passwords are masked only where they stand alone
		}
		// A password that is a piece of the fixed text of a message cannot
		// be told from it.
		if !plainName.MatchString(db) {
			db = "app" // the database name is not what is fuzzed here
		}
		if strings.Contains(db, pw) {
			return // a database named like the password: nothing tells them apart
		}
		for _, word := range []string{"bob", "postgres", "127.0.0.1", "connect", "password", "invalid", "xxxxx", "parse", "DATABASE_URL"} {
			if strings.Contains(word, pw) {
				return
			}
		}
		dsnsFor := func(pw string) []string {
			kvEscaped := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
			return []string{
				"postgresql://bob:" + pw + "@127.0.0.1:5432/" + db,
				"postgresql://bob:" + url.QueryEscape(pw) + "@127.0.0.1:5432/" + db,
				"postgresql://bob:" + url.PathEscape(pw) + "@127.0.0.1:notaport/" + db,
				"postgres://bob@127.0.0.1/" + db + "?password=" + url.QueryEscape(pw),
				"host=127.0.0.1 user=bob password='" + kvEscaped + "' dbname=" + db,
				"host=127.0.0.1 user=bob password='" + kvEscaped + "' port=bad",
				"host=127.0.0.1 password='" + kvEscaped,
			}
		}
		outputs := func(dsn string) []string {
			out := []string{RedactDSN(dsn), RedactDSN("failed: (" + dsn + ")")}
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				return append(out, ParseError(dsn, "--dsn", err).Error())
			}
			return append(out, ConnectError(cfg, errors.New("dial tcp: connection refused")).Error(),
				ConnectError(cfg, &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}).Error())
		}
		// A leak is the password in a line where the same line made with
		// another password does not hold it (then it is the line's own text).
		other := dsnsFor("QzQzQzQzQz")
		// Inside longer text, a URL whose password breaks its line after
		// what reads as a whole URL ("bob:@h/x" then "y@host/db") cannot be
		// told from a URL followed by text; the commands also mask the
		// password they know, so only the DSN alone is checked then.
		first, _, broken := strings.Cut(pw, "\n")
		ambiguous := broken && strings.Contains(first, "@") && strings.ContainsAny(first[strings.LastIndex(first, "@"):], "/?#")
		for i, dsn := range dsnsFor(pw) {
			got, alt := outputs(dsn), outputs(other[i])
			for j, o := range got {
				if ambiguous && j == 1 {
					continue
				}
				if strings.Contains(o, pw) && (j >= len(alt) || !strings.Contains(alt[j], pw)) {
					t.Fatalf("%q: the password %q is in %q", dsn, pw, o)
				}
			}
		}
	})
}

// FuzzMaskQuery puts a password into the statements that carry one (ROLE
// PASSWORD literals of every quoting, connection strings inside literals)
// after any text, and checks that MaskQuery leaves none of it, never
// panics and keeps valid UTF-8 valid.
func FuzzMaskQuery(f *testing.F) {
	for _, s := range [][2]string{
		{"Ab/Cd+Ef=", "SELECT 1"},
		{"it's q", "/* don't */"},
		{`back\slash`, "$$"},
		{"$pw$x$pw$", "'"},
		{"p@ss:w%rd/x", "E'"},
		{"héllo wörld", "-- c"},
		{"a''b\\'c", `"id"`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pw, before string) {
		out := MaskQuery(before)
		if utf8.ValidString(before) && !utf8.ValidString(out) {
			t.Fatalf("MaskQuery(%q) = %q: not UTF-8", before, out)
		}
		if len(pw) < 6 || strings.ContainsAny(pw, "\x00\n\r") || strings.TrimSpace(pw) != pw {
			return
		}
		statementsFor := func(pw string) []string {
			sql := strings.ReplaceAll(pw, "'", "''")
			esql := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
			kv := strings.ReplaceAll(strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw), "'", "''")
			out := []string{
				"ALTER ROLE app PASSWORD '" + sql + "'",
				"ALTER ROLE app PASSWORD'" + sql + "' LOGIN",
				"CREATE USER app WITH ENCRYPTED PASSWORD E'" + esql + "'",
				"ALTER ROLE app PASSWORD /* c */ U&'" + sql + "'",
				"ALTER ROLE app PASSWORD -- c\n'" + sql,
				"SELECT dblink_connect('host=127.0.0.1 password=''" + kv + "'' dbname=app')",
				"SELECT dblink('postgresql://bob:" + url.PathEscape(pw) + "@127.0.0.1/app', 'select 1')",
				"SELECT dblink('postgresql://bob@127.0.0.1/app?password=" + url.QueryEscape(pw) + "', 'select 1')",
			}
			if !strings.Contains(pw, "$q$") && !strings.HasSuffix(pw, "$q") {
				out = append(out, "ALTER ROLE app PASSWORD $q$"+pw+"$q$")
			}
			return out
		}
		other := statementsFor("QzQzQzQzQz")
		for i, stmt := range statementsFor(pw) {
			for _, sep := range []string{"\n", "; "} {
				got := MaskQuery(before + sep + stmt)
				alt := MaskQuery(before + sep + other[i])
				if strings.Contains(got, pw) && !strings.Contains(alt, pw) {
					t.Fatalf("MaskQuery(%q) = %q: the password %q is left", before+sep+stmt, got, pw)
				}
			}
		}
	})
}
