package engine

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"
)

// Passwords never reach the screen, a log or an error. Masking by string
// replacement fails on the inputs that matter most: a parse error echoes a
// connection string that did not parse (an unterminated quote, an escaped
// space), and a short password is also a piece of other words. So the
// password is found the way libpq reads a connection string, and its whole
// value is masked where it stands.

const mask = "xxxxx"

// RedactDSN masks the password of a URL or key=value connection string, and
// of any such string inside text: the userinfo password of a URL (up to the
// last @ before the host) and its password= query values, and the whole
// value of a password keyword, quoted or not, escaped spaces included, an
// unterminated quote running to the end.
func RedactDSN(text string) string {
	return redactKV(redactURLs(text))
}

// redactURLs masks user:password@ in every postgres URL of text, and
// password= query parameters.
func redactURLs(text string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, "://")
		if i < 0 {
			b.WriteString(text)
			break
		}
		b.WriteString(text[:i+3])
		rest := text[i+3:]
		if colon, at := urlPassword(rest); at >= 0 {
			b.WriteString(rest[:colon+1] + mask)
			rest = rest[at:]
		}
		// Go on after the host: the next URL starts past it.
		end := strings.IndexFunc(rest, func(r rune) bool { return r == '/' || r == '?' || r == '#' || unicode.IsSpace(r) })
		if end < 0 {
			end = len(rest)
		}
		b.WriteString(rest[:end])
		text = rest[end:]
	}
	return redactQueryPasswords(b.String())
}

// urlPassword finds the password of the URL whose text after "://" is rest:
// it runs from the first colon to the last @ of the line, since a raw /, ?, #, : or @ in a password is common (base64
// secrets) and would end the authority where a URL parser ends it. A URL
// whose first @ comes before its first colon has a user and no password.
// It returns the colon's and the @'s positions, or -1, -1.
func urlPassword(rest string) (colon, at int) {
	if end := strings.IndexByte(rest, '\n'); end >= 0 {
		rest = rest[:end]
	}
	// The last @ on the line: a password with a raw space is no valid URL,
	// but it is still a password. In a longer text that masks more than the
	// password when an @ follows the URL, never less.
	at = strings.LastIndex(rest, "@")
	colon = strings.Index(rest, ":")
	first := strings.Index(rest, "@")
	if at < 0 || colon < 0 || colon > first {
		return -1, -1
	}
	return colon, at
}

// redactQueryPasswords masks password=… and sslpassword=… in URL queries
// (up to the next & or space).
func redactQueryPasswords(s string) string {
	for _, key := range []string{"?password=", "&password=", "?sslpassword=", "&sslpassword="} {
		for from := 0; ; {
			i := strings.Index(s[from:], key)
			if i < 0 {
				break
			}
			start := from + i + len(key)
			end := strings.IndexAny(s[start:], "& \t\n#")
			if end < 0 {
				end = len(s) - start
			}
			s = s[:start] + mask + s[start+end:]
			from = start + len(mask)
		}
	}
	return s
}

// redactKV masks the values of password and sslpassword keywords, read as
// libpq reads them: key, optional spaces, =, optional spaces, then a value
// in single quotes (backslash escapes a quote or backslash; unterminated, it
// runs to the end) or a run of characters up to unescaped white space.
func redactKV(s string) string {
	lower := strings.ToLower(s)
	var b strings.Builder
	i := 0
	for i < len(s) {
		j := nextKey(lower, i)
		if j < 0 {
			break
		}
		keyEnd := j + strings.IndexByte(lower[j:], 'd') + 1 // "password" or "sslpassword" ends in d
		k := keyEnd
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		if k >= len(s) || s[k] != '=' {
			b.WriteString(s[i:keyEnd])
			i = keyEnd
			continue
		}
		k++
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		b.WriteString(s[i:k])
		end := valueEnd(s, k)
		if end > k {
			b.WriteString(mask)
		}
		i = end
	}
	b.WriteString(s[i:])
	return b.String()
}

// nextKey finds the next "password" keyword at or after i that starts a word.
func nextKey(lower string, i int) int {
	for {
		j := strings.Index(lower[i:], "password")
		if j < 0 {
			return -1
		}
		j += i
		start := j
		if j >= 3 && lower[j-3:j] == "ssl" {
			start = j - 3
		}
		// A word of its own, and not a URL query parameter (masked by redactURLs).
		if start == 0 || !isWordByte(lower[start-1]) && lower[start-1] != '?' && lower[start-1] != '&' {
			return start
		}
		i = j + len("password")
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// valueEnd returns where a key=value value starting at k ends.
func valueEnd(s string, k int) int {
	if k < len(s) && s[k] == '\'' {
		for j := k + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '\'':
				return j + 1
			}
		}
		return len(s) // unterminated: the rest is the value
	}
	j := k
	for j < len(s) {
		if s[j] == '\\' {
			j += 2
			continue
		}
		if s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '`' {
			break
		}
		j++
	}
	return min(j, len(s))
}

// ParseError turns a failure to parse a connection string into one line
// that names the input (--dsn, DATABASE_URL, or the PG* variables when the
// string was empty) and says what to do, with every password masked.
func ParseError(dsn, from string, err error) error {
	reason := err.Error()
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		// pgx's message echoes the connection string, redacted only as well
		// as it can guess: rebuild it without the echo.
		cp := *pce
		cp.ConnString = ""
		reason = strings.TrimPrefix(cp.Error(), "cannot parse ``: ")
	}
	reason = RedactDSN(reason)
	for _, p := range []string{passwordIn(dsn), os.Getenv("PGPASSWORD")} {
		reason = Redact(maskPieces(reason, p), p)
	}
	if strings.TrimSpace(dsn) == "" {
		var set []string
		for _, v := range os.Environ() {
			if name, _, _ := strings.Cut(v, "="); strings.HasPrefix(name, "PG") && name != "PGPASSWORD" {
				set = append(set, v)
			}
		}
		return fmt.Errorf("the PG* variables do not make a connection (%s): %s: fix or unset them, or pass --dsn", strings.Join(set, " "), reason)
	}
	return fmt.Errorf("parse %s: %s: give a URL such as postgres://user@host:5432/db or key=value pairs (%s)", from, reason, RedactDSN(dsn))
}

// maskPieces masks every quoted token of a parser's message that is a piece
// of password: a URL parser names the token it could not read ("invalid
// percent-encoded token: \"w%rd\""), which may be a piece of the password.
func maskPieces(reason, password string) string {
	if password == "" {
		return reason
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(reason, '"')
		if i < 0 {
			b.WriteString(reason)
			return b.String()
		}
		j := strings.IndexByte(reason[i+1:], '"')
		if j < 0 {
			b.WriteString(reason)
			return b.String()
		}
		token := reason[i+1 : i+1+j]
		b.WriteString(reason[:i+1])
		if token != "" && (strings.Contains(password, token) || strings.Contains(token, password)) {
			b.WriteString(mask)
		} else {
			b.WriteString(token)
		}
		b.WriteByte('"')
		reason = reason[i+2+j:]
	}
}

// passwordIn finds the password value of a connection string, "" if none.
func passwordIn(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if colon, at := urlPassword(rest); at >= 0 {
			return rest[colon+1 : at]
		}
		return ""
	}
	lower := strings.ToLower(dsn)
	for i := 0; ; {
		j := nextKey(lower, i)
		if j < 0 {
			return ""
		}
		k := j + strings.IndexByte(lower[j:], 'd') + 1
		for k < len(dsn) && (dsn[k] == ' ' || dsn[k] == '\t') {
			k++
		}
		if k < len(dsn) && dsn[k] == '=' && !strings.HasPrefix(lower[j:], "ssl") {
			k++
			for k < len(dsn) && dsn[k] == ' ' {
				k++
			}
			v := dsn[k:valueEnd(dsn, k)]
			v = strings.TrimPrefix(strings.TrimSuffix(v, "'"), "'")
			return strings.NewReplacer(`\'`, `'`, `\\`, `\`, `\ `, ` `).Replace(v)
		}
		i = k
	}
}

// Redact removes a password from text, where it stands as a token of its
// own: a password of a few letters is also a piece of other words, which
// must stay readable.
func Redact(text, password string) string {
	if password == "" {
		return text
	}
	var b strings.Builder
	for {
		i := strings.Index(text, password)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		end := i + len(password)
		// A password that starts or ends with a character that is no part
		// of a word starts or ends a token wherever it stands.
		standalone := len(password) >= 8 ||
			(i == 0 || !isWordByte(text[i-1]) || !isWordByte(password[0])) &&
				(end == len(text) || !isWordByte(text[end]) || !isWordByte(password[len(password)-1]))
		b.WriteString(text[:i])
		if standalone {
			b.WriteString(mask)
		} else {
			b.WriteString(password)
		}
		text = text[end:]
	}
}

// MaskQuery masks the passwords a query text may carry: the literal after a
// PASSWORD keyword (CREATE or ALTER ROLE … [ENCRYPTED] PASSWORD '…', E'…'
// or $tag$…$tag$, an unterminated one to the end), and the passwords of
// connection strings inside it (dblink, postgres_fdw's options). The
// dashboard, the JSON and the recordings show queries only through it.
func MaskQuery(q string) string {
	return RedactDSN(maskPasswordLiterals(q))
}

func maskPasswordLiterals(q string) string {
	lower := strings.ToLower(q)
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(lower[i:], "password")
		if j < 0 {
			break
		}
		j += i
		k := j + len("password")
		if j > 0 && isWordByte(lower[j-1]) || k < len(q) && isWordByte(lower[k]) {
			b.WriteString(q[i:k])
			i = k
			continue
		}
		// The keyword, then white space, then the literal: 'password' as a
		// value of its own is left as it is.
		ws := k
		for k < len(q) && unicode.IsSpace(rune(q[k])) {
			k++
		}
		if k == ws || j > 0 && q[j-1] == '\'' {
			b.WriteString(q[i:k])
			i = k
			continue
		}
		start, end := literal(q, k)
		b.WriteString(q[i:start])
		if end > start {
			b.WriteString(mask)
			b.WriteString(closing(q, k, end))
		}
		i = max(end, start)
	}
	b.WriteString(q[i:])
	return b.String()
}

// literal finds the string literal that starts at k in q: it returns where
// its content starts (after the opening quote) and where the literal ends
// (after its closing quote, or the end of q). start == end when none.
func literal(q string, k int) (start, end int) {
	switch {
	case k < len(q) && q[k] == '\'':
		return k + 1, quotedEnd(q, k+1, false)
	case k+1 < len(q) && (q[k] == 'e' || q[k] == 'E') && q[k+1] == '\'':
		return k + 2, quotedEnd(q, k+2, true)
	case k < len(q) && q[k] == '$':
		t := strings.IndexByte(q[k+1:], '$')
		if t < 0 || strings.ContainsAny(q[k+1:k+1+t], " \t\n'") {
			return k, k
		}
		tag := q[k : k+t+2]
		c := strings.Index(q[k+len(tag):], tag)
		if c < 0 {
			return k + len(tag), len(q)
		}
		return k + len(tag), k + len(tag) + c + len(tag)
	}
	return k, k
}

// quotedEnd is where a quoted literal whose content starts at i ends: after
// the quote that closes it (a doubled quote is a quote inside; with
// backslashes, an escaped one too).
func quotedEnd(q string, i int, backslashes bool) int {
	for i < len(q) {
		switch {
		case backslashes && q[i] == '\\':
			i += 2
		case q[i] == '\'' && i+1 < len(q) && q[i+1] == '\'':
			i += 2
		case q[i] == '\'':
			return i + 1
		default:
			i++
		}
	}
	return len(q)
}

// closing is the closing quote or tag of the literal at k that ends at end,
// to write back after the mask ("" for one cut short).
func closing(q string, k, end int) string {
	if end >= len(q) && !strings.HasSuffix(q, "'") && !strings.HasSuffix(q, "$") {
		return ""
	}
	if q[k] == '$' {
		t := strings.IndexByte(q[k+1:], '$')
		return q[k : k+t+2]
	}
	return "'"
}
