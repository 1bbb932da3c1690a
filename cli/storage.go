package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/formats/storage"
	"github.com/segpipe/segpipe/internal/bytesize"
	"github.com/segpipe/segpipe/pipeline"
)

// storageFlags configure how every command reaches shards in a bucket.
// They are global (given before or after the sub-command) because every
// command that takes a shard directory also takes a URL.
func storageFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "cache-dir", Sources: ucli.EnvVars("SEGPIPE_CACHE_DIR"),
			Usage: "keep the row groups read from a bucket in local `DIR` (shared by processes, kept across runs)"},
		&ucli.StringFlag{Name: "cache-size", Value: "10GiB", Sources: ucli.EnvVars("SEGPIPE_CACHE_SIZE"),
			Usage: "budget of --cache-dir, least recently used first out"},
	}
}

// setupStorage sets the options every shard location opened by this run
// uses (pipeline.OpenShards, shard.Open, shard.Create).
func setupStorage(c *ucli.Command) error {
	o := storage.Options{CacheDir: c.String("cache-dir")}
	if o.CacheDir != "" {
		n, err := bytesize.Parse(c.String("cache-size"))
		if err != nil {
			return usagef("--cache-size: %v", err)
		}
		if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
			return usagef("--cache-dir: %v", err)
		}
		o.CacheBytes = n
	}
	storage.SetDefaultOptions(o)
	return nil
}

// storageBefore chains setupStorage after the root's other setup.
func storageBefore(next ucli.BeforeFunc) ucli.BeforeFunc {
	return func(ctx context.Context, c *ucli.Command) (context.Context, error) {
		ctx, err := next(ctx, c)
		if err != nil {
			return ctx, err
		}
		return ctx, setupStorage(c)
	}
}

// checkShardRoot accepts a local directory or a bucket URL as serve's
// shard root.
func checkShardRoot(root string) error { return checkShardDir("--shards", root) }

// checkShardDir accepts a bucket URL, or a local path that is a directory:
// a path that does not exist or is not a directory is a usage error that
// says which, naming flag.
func checkShardDir(flag, location string) error {
	loc, err := storage.ParseLocation(location)
	if err != nil {
		return usagef("%s: %v", flag, err)
	}
	if loc.IsBucket() {
		return nil
	}
	st, err := os.Stat(loc.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef("%s %q does not exist", flag, location)
	case err != nil:
		return usagef("%s %q: %v", flag, location, err)
	case !st.IsDir():
		return usagef("%s %q is not a directory", flag, location)
	}
	return nil
}

// checkInputPath accepts an existing local path a command reads (a file,
// or a directory where dirOK): a path that does not exist, or a directory
// where a file is wanted, is a usage error that says which, naming flag.
func checkInputPath(flag, path string, dirOK bool) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef("%s %q does not exist", flag, path)
	case err != nil:
		return usagef("%s %q: %v", flag, path, err)
	case st.IsDir() && !dirOK:
		return usagef("%s %q is a directory, not a file", flag, path)
	}
	return nil
}

// openShards opens the shard set a command's flag names, after
// checkShardDir; ctx (the command's: Ctrl-C) bounds reading its manifest
// and footers.
func openShards(ctx context.Context, flag, location string) (*pipeline.ShardSource, error) {
	if err := checkShardDir(flag, location); err != nil {
		return nil, err
	}
	return pipeline.OpenShardsContext(ctx, location)
}

// openShardsBelow opens the shard sets a server is asked for below a
// bucket root (a local root is served by remote.Server itself).
func openShardsBelow(root string) func(ctx context.Context, set string) (pipeline.Source, error) {
	loc, err := storage.ParseLocation(root)
	if err != nil || !loc.IsBucket() {
		return nil
	}
	return func(ctx context.Context, set string) (pipeline.Source, error) {
		sub, err := loc.Below(set)
		if err != nil {
			return nil, fmt.Errorf("shard set %q: %w", set, err)
		}
		src, err := pipeline.OpenShardsContext(ctx, sub.String())
		if errors.Is(err, shard.ErrNoManifest) {
			return nil, fmt.Errorf("shard set %q: %w", set, os.ErrNotExist)
		}
		return src, err
	}
}

// isURL reports whether a shard location is a URL (kept as given in a
// run's config.json) rather than a path (made absolute there).
func isURL(location string) bool {
	scheme, _, ok := strings.Cut(location, "://")
	if !ok {
		return false
	}
	loc, err := storage.ParseLocation(location)
	return err == nil && (loc.IsBucket() || strings.EqualFold(scheme, "file"))
}
