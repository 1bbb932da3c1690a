package cli

import (
	"io"

	ucli "github.com/urfave/cli/v3"
)

// Commands returns a fresh segpipe command tree, writing nowhere, for
// tools that check command lines against the real flag definitions (the
// Kubernetes manifests' test in deploy/ parses their args with it). Run
// does not use it.
func Commands() *ucli.Command { return newRoot(io.Discard, io.Discard) }
