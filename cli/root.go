// Package cli wires segpipe's libraries into the segpipe command line.
//
// Each sub-command lives in its own file and is listed once in commands
// below. Exit codes: 0 success, 1 failure, 2 usage error (bad flags, a flag
// value out of its range, an argument a command does not take, a group
// such as convert run without its sub-command, an input path that does not
// exist, inputs wrong as a whole, settings whose memory estimate is over
// the limit). Every usage error is a usageError (usagef) or one of the
// library errors Run maps to it; a command without ArgsUsage takes no
// positional argument (refuseArgs), and integer flags are checked against
// their range by checkRanges.
//
// A Go runtime fatal error (out of memory, a concurrent map write) also
// exits 2: the runtime prints "fatal error:" and exits itself, past any
// deferred function or recover, so no code in this process can give it
// another code. The remedy is not to reach it: image sizes and instance
// counts are checked against their limits and the memory budget before
// anything is allocated for them. A supervisor that must tell the two
// apart reads stderr: "fatal error:" (the runtime) against "segpipe:"
// (Run).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/pipeline"
)

// Exit codes returned by Run.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Version is the segpipe release; overridden at link time with
// -ldflags "-X github.com/segpipe/segpipe/cli.Version=...".
var Version = "0.1.0-dev"

// commands lists every sub-command constructor. Each returns a fresh
// command so Run can be called many times (tests do).
var commands = []func() *ucli.Command{
	convertCommand,
	benchCommand,
	inspectCommand,
	quickstartCommand,
	versionCommand,
	evalCommand,
	synthCommand,
	modelCommand,
	trainCommand,
	predictCommand,
	serveCommand,
	dumpCommand,
	previewCommand,
	manifestCommand,
	deviceCommand,
}

// usageError marks errors caused by how the command was invoked.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns an error that makes Run exit with ExitUsage.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Run executes the segpipe command line and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	err := root.Run(ctx, args)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "segpipe: %v\n", err)
	var ue usageError
	// A loader configuration over the memory limit is a request to lower
	// --batch or --imgsz, refused before anything was allocated.
	// A loader setting out of range is the caller's, whichever command
	// passed it.
	if errors.As(err, &ue) || isUsageErr(err) || errors.Is(err, pipeline.ErrMemoryLimit) || errors.Is(err, pipeline.ErrInvalidConfig) {
		return ExitUsage
	}
	return ExitFailure
}

// isUsageErr recognises the parse errors urfave/cli returns as plain errors.
func isUsageErr(err error) bool {
	msg := err.Error()
	for _, s := range []string{"flag provided but not defined", "invalid value", "Required flag", "required flag", "No help topic", "flag needs an argument"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func newRoot(stdout, stderr io.Writer) *ucli.Command {
	cmds := make([]*ucli.Command, 0, len(commands))
	for _, c := range commands {
		cmds = append(cmds, c())
	}
	root := &ucli.Command{
		Name:  "segpipe",
		Usage: "keep GPUs fed while training instance-segmentation models",
		Description: "segpipe converts COCO-format datasets into Parquet shards, streams augmented\n" +
			"training batches with per-instance masks on the prototype grid, serves them to\n" +
			"remote trainers over Arrow Flight and trains YOLO26-seg style models.\n\n" +
			"Start with: segpipe quickstart",
		Version:   Version,
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: append([]ucli.Flag{
			&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
			&ucli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json"},
		}, storageFlags()...),
		Before: storageBefore(func(ctx context.Context, c *ucli.Command) (context.Context, error) {
			return ctx, setupLogging(c, stderr)
		}),
		OnUsageError: func(ctx context.Context, c *ucli.Command, err error, isSubcommand bool) error {
			return usageError{err}
		},
		ExitErrHandler: func(context.Context, *ucli.Command, error) {},
		ArgValidator:   refuseArgs,
		Commands:       cmds,
	}
	setGroupActions(root)
	return root
}

// setGroupActions gives every command that only groups sub-commands (the
// root, convert, model, manifest) the action groupAction.
func setGroupActions(c *ucli.Command) {
	if len(c.Commands) > 0 && c.Action == nil {
		c.Action = groupAction
	}
	for _, sub := range c.Commands {
		setGroupActions(sub)
	}
}

// groupAction refuses a group run without a sub-command, after printing
// its help to stderr (a script that forgot the sub-command must not pass),
// and an argument that names none of its sub-commands; both are usage
// errors that list the sub-commands. --help still prints the help and
// exits 0.
func groupAction(_ context.Context, c *ucli.Command) error {
	names := strings.Join(subcommandNames(c), ", ")
	if !c.Args().Present() {
		if c.Root() == c {
			ucli.HelpPrinter(c.Root().ErrWriter, ucli.RootCommandHelpTemplate, c)
		} else {
			ucli.HelpPrinter(c.Root().ErrWriter, ucli.SubcommandHelpTemplate, c)
		}
		return usagef("%s needs a command: %s", c.FullName(), names)
	}
	return usagef("unknown command %q: the commands of %s are %s (%s --help describes them)",
		c.Args().First(), c.FullName(), names, c.FullName())
}

// subcommandNames lists c's sub-commands but help; none for a leaf.
func subcommandNames(c *ucli.Command) []string {
	var names []string
	for _, sub := range c.VisibleCommands() {
		if sub.Name != "help" {
			names = append(names, sub.Name)
		}
	}
	return names
}

// refuseArgs is the argument check of every command (the root's
// ArgValidator, which urfave/cli applies to each descendant that sets
// none): a command that declares no ArgsUsage takes no positional
// argument, so a stray word (a flag value missing its flag, a typo'd
// sub-command) is a usage error instead of being ignored. A command with
// ArgsUsage checks its own count; a group's arguments are its
// sub-commands (groupAction).
func refuseArgs(_ context.Context, c *ucli.Command) error {
	if c.NArg() == 0 || c.ArgsUsage != "" || len(subcommandNames(c)) > 0 {
		return nil
	}
	return usagef("%s takes no arguments, got %q (every input is a flag: %s --help lists them)",
		c.FullName(), c.Args().Slice(), c.FullName())
}

// intRange is the accepted range of an integer flag, for checkRanges.
// A zero hi means no upper bound.
type intRange struct {
	flag   string
	lo, hi int64
}

// atLeast is the range of a flag with a lower bound only.
func atLeast(flag string, lo int64) intRange { return intRange{flag: flag, lo: lo} }

// checkRanges checks c's integer flags against their ranges: a value out of
// range is a usage error naming the flag, the value and the range, before
// a default (the loader's for 0, say) could silently replace it.
func checkRanges(c *ucli.Command, ranges ...intRange) error {
	for _, r := range ranges {
		v := int64(c.Int(r.flag))
		switch {
		case r.hi != 0 && (v < r.lo || v > r.hi):
			return usagef("--%s %d: want %d to %d", r.flag, v, r.lo, r.hi)
		case v < r.lo:
			return usagef("--%s %d: want at least %d", r.flag, v, r.lo)
		}
	}
	return nil
}

func setupLogging(c *ucli.Command, stderr io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch c.String("log-format") {
	case "text":
		h = slog.NewTextHandler(stderr, opts)
	case "json":
		h = slog.NewJSONHandler(stderr, opts)
	default:
		return usagef("--log-format %q: want text or json", c.String("log-format"))
	}
	slog.SetDefault(slog.New(h))
	return nil
}
