package engine

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var plainName = regexp.MustCompile(`^[A-Za-z0-9_]{1,20}$`)

// FuzzPasswordNeverPrinted puts a password into URL and key=value
// connection strings, raw and escaped, parses each as the commands do, and
// checks that no line pooltop builds from them (ParseError on a failure,
// ConnectError, RedactDSN) holds the password.
func FuzzPasswordNeverPrinted(f *testing.F) {
	for _, pw := range []string{"Ab/Cd+Ef=", "p@ss:w%rd/x", "a?b#c:d", "it's q", `back\slash`, "%zz%", "s p a c e", "::::@@@@", "héllo wörld"} {
		f.Add(pw, "app")
	}
	f.Fuzz(func(t *testing.T, pw, db string) {
		if len(pw) < 6 || strings.ContainsAny(pw, "\x00\n\r") || strings.TrimSpace(pw) != pw || strings.Contains(db, "\x00") {
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
		for i, dsn := range dsnsFor(pw) {
			got, alt := outputs(dsn), outputs(other[i])
			for j, o := range got {
				if strings.Contains(o, pw) && (j >= len(alt) || !strings.Contains(alt[j], pw)) {
					t.Fatalf("%q: the password %q is in %q", dsn, pw, o)
				}
			}
		}
	})
}
