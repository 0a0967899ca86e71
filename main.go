// Command pooltop is a lease engine for a PostgreSQL resource pool and a
// terminal dashboard that shows such a pool live. Run without arguments it
// starts the embedded demo; `pooltop --help` lists the commands. The command
// line lives in internal/cli.
package main

import (
	"os"

	"github.com/pooltop-dev/pooltop/internal/cli"
)

func main() { os.Exit(cli.Main()) }
