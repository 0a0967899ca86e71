// Exit codes, the errors that carry them, and the one-line and JSON
// output every command shares.

package cli

import (
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/pooltop-dev/pooltop/engine"
)

// violationError carries exit code 6.
type violationError struct{ error }

// usageError marks errors in how pooltop was called (exit 2).
type usageError struct{ error }

// oneLine joins an error's lines: every error is one line on stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Exit codes. Scripts tell "rejected by the lease or the fence" from
// "broken" by these; they are documented in the README and in --help.
const (
	exitOK         = 0
	exitError      = 1 // anything broken: bad connection, SQL error, missing schema
	exitUsage      = 2 // bad flags or arguments
	exitLeaseLost  = 3 // the lease is no longer the caller's (expired, consumed, not held)
	exitStaleToken = 4 // the fence rejected the token: the id moved on to a newer one
	exitPoolEmpty  = 5 // no UNUSED id could be claimed
	exitViolation  = 6 // chaos or verify found an invariant that does not hold, or doctor a failed check
)

const exitCodesHelp = `Exit codes: 0 ok, 1 error, 2 usage, 3 lease lost (expired, consumed or
not held), 4 stale token (rejected by the fence), 5 pool empty, 6 invariant
violated (chaos, verify) or a failed check (doctor).`

// exitCode maps an error to the documented exit code.
func exitCode(err error) int {
	var ue usageError
	var ve violationError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ve):
		return exitViolation
	case errors.Is(err, engine.ErrStaleToken):
		return exitStaleToken
	case errors.Is(err, engine.ErrLeaseLost):
		return exitLeaseLost
	case errors.Is(err, engine.ErrPoolEmpty):
		return exitPoolEmpty
	case errors.Is(err, engine.ErrInvalidArgument):
		return exitUsage
	}
	return exitError
}

// emit prints a command's result: v as one line of JSON with --json, else
// the text that text writes.
func (g *globals) emit(v any, text func(w io.Writer) error) error {
	if g.jsonOut {
		return writeJSON(g.stdout, v)
	}
	return text(g.stdout)
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}
