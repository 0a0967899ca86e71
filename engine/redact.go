package engine

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
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
		colon, at := urlPassword(rest)
		if b.Len() == i+3 && isScheme(text[:i]) {
			// The text is one connection string: its password runs from
			// the first colon to its last @, line breaks and all.
			colon, at = urlPasswordIn(rest)
		}
		if at >= 0 {
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
	line := rest
	if end := strings.IndexByte(rest, '\n'); end >= 0 {
		line = rest[:end]
	}
	// A password with a line break, the lines before it looking like a
	// whole authority ("bob:@000" then "0@host"): while the authority has
	// not reached a path and a later line holds an @, the lines up to it
	// belong to the password (as on one line, the last @ ends it).
	// A line with no @ yet is a password broken before its @, whatever
	// follows the colon: a host and port followed by a line with an @ in
	// it is masked too, since the two cannot be told apart.
	for len(line) < len(rest) && (!strings.Contains(line, "@") || !strings.ContainsAny(line[strings.LastIndex(line, "@")+1:], "/?#")) {
		next := rest[len(line)+1:]
		at := strings.IndexByte(next, '@')
		if at < 0 || strings.Contains(next[:at], "://") {
			break
		}
		if end := strings.IndexByte(next[at:], '\n'); end >= 0 {
			next = next[:at+end]
		}
		line = rest[:len(line)+1+len(next)]
	}
	colon, at = urlPasswordIn(line)
	// A line with a user and colon but no @ is a password with a line
	// break in it, unless what follows the colon is a port.
	if at < 0 && len(line) < len(rest) && !strings.Contains(line, "@") {
		if c := strings.IndexByte(line, ':'); c >= 0 && !isPort(line[c+1:]) {
			return urlPasswordIn(rest)
		}
	}
	return colon, at
}

// isScheme says whether s is a URL scheme pgx takes.
func isScheme(s string) bool {
	return s == "postgres" || s == "postgresql"
}

// isPort says whether s starts with a port: digits, then the end or a
// character that ends the host part.
func isPort(s string) bool {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n > 0 && (n == len(s) || strings.IndexByte("/?#,; \t\r", s[n]) >= 0)
}

// urlPasswordIn is urlPassword over the whole of rest, for a connection
// string on its own, whose password may hold a line break.
func urlPasswordIn(rest string) (colon, at int) {
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
	lower := asciiLower(s)
	var b strings.Builder
	i := 0
	for i < len(s) {
		j := nextKey(lower, i)
		if j < 0 {
			break
		}
		key := keyEnd(lower, j)
		k := skipBlanks(s, key)
		if k >= len(s) || s[k] != '=' {
			b.WriteString(s[i:key])
			i = key
			continue
		}
		k = skipBlanks(s, k+1)
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

// keyEnd is the end of the password keyword nextKey found at j: "password"
// and "sslpassword" both end in d.
func keyEnd(lower string, j int) int { return j + strings.IndexByte(lower[j:], 'd') + 1 }

// skipBlanks is the first position from k that is not a space or a tab.
func skipBlanks(s string, k int) int {
	for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
		k++
	}
	return k
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
	return fmt.Errorf("parse %s: %s: give a URL such as postgres://user@host:5432/db or key=value pairs (%s)", from, reason, Redact(RedactDSN(dsn), passwordIn(dsn)))
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
		if colon, at := urlPasswordIn(rest); at >= 0 {
			return rest[colon+1 : at]
		}
		return ""
	}
	lower := asciiLower(dsn)
	for i := 0; ; {
		j := nextKey(lower, i)
		if j < 0 {
			return ""
		}
		k := skipBlanks(dsn, keyEnd(lower, j))
		if k < len(dsn) && dsn[k] == '=' && !strings.HasPrefix(lower[j:], "ssl") {
			k = skipBlanks(dsn, k+1)
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
// PASSWORD keyword (CREATE or ALTER ROLE … [ENCRYPTED] PASSWORD '…', E'…',
// U&'…', N'…' or $tag$…$tag$, with or without space or comments before it,
// continued on the next line, an unterminated one to the end), and the
// passwords of connection strings inside it (dblink, postgres_fdw's
// options, CREATE SUBSCRIPTION), read from each string literal with its
// quotes unescaped. The dashboard, the JSON and the recordings show
// queries only through it.
func MaskQuery(q string) string {
	return RedactDSN(maskQuotedKV(maskLiteralDSNs(maskPasswordLiterals(q))))
}

// maskQuotedKV masks a password= value quoted as a connection string inside
// a SQL literal quotes it (”…” or \'…\'), where the literals of q could
// not be told apart (a comment or a quote cut short before them).
func maskQuotedKV(s string) string {
	lower := asciiLower(s)
	var b strings.Builder
	i := 0
	for i < len(s) {
		j := nextKey(lower, i)
		if j < 0 {
			break
		}
		k := skipBlanks(s, keyEnd(lower, j))
		quote := ""
		if k < len(s) && s[k] == '=' {
			k = skipBlanks(s, k+1)
			if strings.HasPrefix(s[k:], "''") || strings.HasPrefix(s[k:], `\'`) {
				quote = s[k : k+2]
			}
		}
		if quote == "" {
			b.WriteString(s[i:k])
			i = k
			continue
		}
		end, closed := len(s), false
		for v := k + 2; v < len(s); v++ {
			if strings.HasPrefix(s[v:], quote) {
				end, closed = v+2, true
				break
			}
			if s[v] == '\\' {
				v++ // an escaped quote or backslash of the connection string
			}
		}
		b.WriteString(s[i:k] + quote + mask)
		if closed {
			b.WriteString(quote)
		}
		i = end
	}
	b.WriteString(s[i:])
	return b.String()
}

func maskPasswordLiterals(q string) string {
	lower := asciiLower(q)
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(lower[i:], "password")
		if j < 0 {
			break
		}
		j += i
		k := j + len("password")
		// A word of its own; 'password' as a value of its own is left as
		// it is.
		if j > 0 && (isWordByte(lower[j-1]) || q[j-1] == '\'' || q[j-1] == '"') || k < len(q) && isWordByte(lower[k]) {
			b.WriteString(q[i:k])
			i = k
			continue
		}
		k = skipSpaceAndComments(q, k)
		start, end, backslashes := literal(q, k)
		if end <= start {
			b.WriteString(q[i:k])
			i = k
			continue
		}
		// The literal, then any continuation: a quoted literal that follows
		// it after white space with a newline is the same string.
		b.WriteString(q[i:start])
		b.WriteString(mask)
		b.WriteString(closing(q, k, end))
		i = end
		for q[k] != '$' && end < len(q) && q[end-1] == '\'' {
			next := skipSpaceAndComments(q, end)
			if next >= len(q) || q[next] != '\'' || !strings.Contains(q[end:next], "\n") {
				break
			}
			end = quotedEnd(q, next+1, backslashes)
			b.WriteString(q[i : next+1])
			b.WriteString(mask)
			b.WriteString(closing(q, next, end))
			i = end
		}
	}
	b.WriteString(q[i:])
	return b.String()
}

// skipSpaceAndComments returns where the next token after k starts: past
// white space, -- comments and (nested) /* */ comments.
func skipSpaceAndComments(q string, k int) int {
	for k < len(q) {
		switch {
		case unicode.IsSpace(rune(q[k])):
			k++
		case strings.HasPrefix(q[k:], "--"):
			e := strings.IndexByte(q[k:], '\n')
			if e < 0 {
				return len(q)
			}
			k += e + 1
		case strings.HasPrefix(q[k:], "/*"):
			k = commentEnd(q, k)
		default:
			return k
		}
	}
	return k
}

// commentEnd is where the /* comment at k ends (comments nest).
func commentEnd(q string, k int) int {
	depth := 0
	for k < len(q) {
		switch {
		case strings.HasPrefix(q[k:], "/*"):
			depth++
			k += 2
		case strings.HasPrefix(q[k:], "*/"):
			depth--
			k += 2
			if depth == 0 {
				return k
			}
		default:
			k++
		}
	}
	return len(q)
}

// literal finds the string literal that starts at k in q: it returns where
// its content starts (after the opening quote or tag) and where the literal
// ends (after its closing quote or tag, or the end of q), and whether a
// backslash escapes in it (E'…'). start == end when none.
func literal(q string, k int) (start, end int, backslashes bool) {
	prefix := 0
	switch {
	case k+1 < len(q) && (q[k] == 'e' || q[k] == 'E') && q[k+1] == '\'':
		return k + 2, quotedEnd(q, k+2, true), true
	case k+2 < len(q) && (q[k] == 'u' || q[k] == 'U') && q[k+1] == '&' && q[k+2] == '\'':
		prefix = 2
	case k+1 < len(q) && (q[k] == 'n' || q[k] == 'N') && q[k+1] == '\'':
		prefix = 1
	case k < len(q) && q[k] == '$':
		tag, ok := dollarTag(q, k)
		if !ok {
			return k, k, false
		}
		c := strings.Index(q[k+len(tag):], tag)
		if c < 0 {
			return k + len(tag), len(q), false
		}
		return k + len(tag), k + len(tag) + c + len(tag), false
	}
	if k+prefix < len(q) && q[k+prefix] == '\'' {
		return k + prefix + 1, quotedEnd(q, k+prefix+1, false), false
	}
	return k, k, false
}

// dollarTag reads the $tag$ that opens a dollar-quoted literal at k: the
// tag is empty or an identifier that does not start with a digit.
func dollarTag(q string, k int) (string, bool) {
	t := strings.IndexByte(q[k+1:], '$')
	if t < 0 {
		return "", false
	}
	tag := q[k+1 : k+1+t]
	for n, c := range []byte(tag) {
		if !isWordByte(c) && c < 0x80 || n == 0 && c >= '0' && c <= '9' {
			return "", false
		}
	}
	return q[k : k+t+2], true
}

// maskLiteralDSNs masks the passwords of connection strings inside the
// string literals of q: each literal is read with its quotes unescaped
// (” and, in E'…', \' and \\), as the function that receives it reads it,
// and written back escaped when RedactDSN changed it. Comments, quoted
// identifiers and dollar-quoted bodies are passed over (RedactDSN reads
// them as they stand).
func maskLiteralDSNs(q string) string {
	var b strings.Builder
	i := 0
	for k := 0; k < len(q); {
		switch c := q[k]; {
		case strings.HasPrefix(q[k:], "--"):
			if e := strings.IndexByte(q[k:], '\n'); e >= 0 {
				k += e + 1
			} else {
				k = len(q)
			}
		case strings.HasPrefix(q[k:], "/*"):
			k = commentEnd(q, k)
		case c == '"':
			if e := strings.IndexByte(q[k+1:], '"'); e >= 0 {
				k += e + 2
			} else {
				k = len(q)
			}
		case c == '$' && (k == 0 || !isWordByte(q[k-1])):
			_, end, _ := literal(q, k)
			k = max(end, k+1)
		case c == '\'':
			backslashes := k > 0 && (q[k-1] == 'e' || q[k-1] == 'E') && (k == 1 || !isWordByte(q[k-2]))
			end, closed := quotedClose(q, k+1, backslashes)
			body := q[k+1 : end]
			if closed {
				body = q[k+1 : end-1]
			}
			text := unquote(body, backslashes)
			if red := RedactDSN(text); red != text {
				b.WriteString(q[i : k+1])
				b.WriteString(requote(red, backslashes))
				if closed {
					b.WriteByte('\'')
				}
				i = end
			}
			k = end
		default:
			k++
		}
	}
	b.WriteString(q[i:])
	return b.String()
}

// unquote is the value of a quoted literal's body.
func unquote(body string, backslashes bool) string {
	if backslashes {
		body = strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(body)
	}
	return strings.ReplaceAll(body, "''", "'")
}

// requote escapes a value back into a quoted literal's body.
func requote(v string, backslashes bool) string {
	if backslashes {
		v = strings.ReplaceAll(v, `\`, `\\`)
	}
	return strings.ReplaceAll(v, "'", "''")
}

// quotedEnd is where a quoted literal whose content starts at i ends: after
// the quote that closes it (a doubled quote is a quote inside; with
// backslashes, an escaped one too), or the end of q.
func quotedEnd(q string, i int, backslashes bool) int {
	end, _ := quotedClose(q, i, backslashes)
	return end
}

// quotedClose is quotedEnd, and whether a quote closes the literal.
func quotedClose(q string, i int, backslashes bool) (int, bool) {
	for i < len(q) {
		switch {
		case backslashes && q[i] == '\\':
			i += 2
		case q[i] == '\'' && i+1 < len(q) && q[i+1] == '\'':
			i += 2
		case q[i] == '\'':
			return i + 1, true
		default:
			i++
		}
	}
	return len(q), false
}

// closing is the closing quote or tag of the literal at k that ends at end,
// to write back after the mask ("" for one cut short).
func closing(q string, k, end int) string {
	if end >= len(q) && !strings.HasSuffix(q, "'") && !strings.HasSuffix(q, "$") {
		return ""
	}
	if q[k] == '$' {
		tag, _ := dollarTag(q, k)
		return tag
	}
	return "'"
}

// asciiLower lowers the ASCII letters of s and nothing else, so that an
// index into it is an index into s: strings.ToLower changes the length of
// invalid UTF-8 (to U+FFFD) and of some letters (the Kelvin sign, İ), and
// the keywords looked for are ASCII.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Addr names the server of a connection string as user@host:port/database,
// with neither its password nor a piece of it: in a URL whose password
// holds an unescaped @, / or # a parser takes pieces of the password for
// the host or the database, and those are masked.
func Addr(dsn string) string {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "(a DSN that does not parse)"
	}
	return redactPassword(fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database), dsn, cc.Password)
}

// redactPassword masks in text the password of dsn as written, the one a
// parser read (parsed), and each piece of them between the characters a
// URL parser splits on.
func redactPassword(text, dsn, parsed string) string {
	for _, pw := range []string{passwordIn(dsn), parsed} {
		if pw == "" {
			continue
		}
		text = Redact(text, pw)
		for _, piece := range strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune("@/?#:", r) }) {
			text = Redact(text, piece)
		}
	}
	return text
}
