//go:build pqarrow_read_only

package cli

import (
	"context"

	ucli "github.com/urfave/cli/v3"
)

// The read-only build (-tags pqarrow_read_only: scripts/build-small.sh,
// the edge profile) links no Parquet writer: arrow-go leaves its write
// path out under that tag and formats/shard's writer refuses with
// shard.ErrReadOnly. Every command that writes shards is refused here
// instead, as a usage error before it reads a file, so that a conversion
// never starts (and never leaves a half-written --out) on a binary that
// cannot finish it. The commands keep their flags, help and argument
// checks, so that help and scripts see the same tree as in the full build
// and a mistyped flag is reported as such.
func init() {
	for i, mk := range commands {
		commands[i] = func() *ucli.Command { return refuseWrites(mk()) }
	}
}

// writesShards names the top-level commands that write Parquet shards.
var writesShards = map[string]bool{"convert": true, "quickstart": true}

// refuseWrites returns c unchanged unless it writes shards; then the
// Before of each command under it that runs (a leaf: a group still only
// lists its sub-commands), which runs after flags and arguments are parsed
// and before required flags are checked, refuses.
func refuseWrites(c *ucli.Command) *ucli.Command {
	if writesShards[c.Name] {
		refuseLeaves(c)
	}
	return c
}

func refuseLeaves(c *ucli.Command) {
	c.Usage += " (not in this read-only build)"
	for _, sub := range c.Commands {
		refuseLeaves(sub)
	}
	if len(c.Commands) == 0 {
		c.Before = func(ctx context.Context, cmd *ucli.Command) (context.Context, error) {
			return ctx, readOnlyRefusal(cmd)
		}
	}
}

// readOnlyRefusal is the error every shard-writing command returns in the
// read-only build; it names the build that has the command.
func readOnlyRefusal(c *ucli.Command) error {
	return usagef("%s writes Parquet shards, which this read-only build (-tags pqarrow_read_only, scripts/build-small.sh) "+
		"cannot do; run it with the full segpipe build (go build ., go install github.com/segpipe/segpipe@latest, "+
		"or the segpipe command of pip install segpipe), then copy the shards here", c.FullName())
}
