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
		kvEscaped := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
		dsns := []string{
			"postgresql://bob:" + pw + "@127.0.0.1:5432/" + db,
			"postgresql://bob:" + url.QueryEscape(pw) + "@127.0.0.1:5432/" + db,
			"postgresql://bob:" + url.PathEscape(pw) + "@127.0.0.1:notaport/" + db,
			"postgres://bob@127.0.0.1/" + db + "?password=" + url.QueryEscape(pw),
			"host=127.0.0.1 user=bob password='" + kvEscaped + "' dbname=" + db,
			"host=127.0.0.1 user=bob password='" + kvEscaped + "' port=bad",
			"host=127.0.0.1 password='" + kvEscaped,
		}
		for _, dsn := range dsns {
			var out []string
			out = append(out, RedactDSN(dsn), RedactDSN("failed: ("+dsn+")"))
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				out = append(out, ParseError(dsn, "--dsn", err).Error())
			} else {
				out = append(out, ConnectError(cfg, errors.New("dial tcp: connection refused")).Error(),
					ConnectError(cfg, &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}).Error())
				if cfg.Password != "" && cfg.Password != pw && len(cfg.Password) >= 6 {
					// pgx read another password out of it (an escape
					// undone): that one must not show either.
					for _, o := range out {
						if strings.Contains(o, cfg.Password) {
							t.Fatalf("%q: the password pgx read, %q, is in %q", dsn, cfg.Password, o)
						}
					}
				}
			}
			for _, o := range out {
				if strings.Contains(o, pw) {
					t.Fatalf("%q: the password %q is in %q", dsn, pw, o)
				}
			}
		}
	})
}
