// Package testenv holds, in its subdirectories, what only tests use: the
// shared material and its module copy (shared), a real S3-compatible server
// (s3test), synthetic and damaged shard sets (synthshards, shardfault,
// batchfault), example data (exampledata) and the PyTorch reference runner
// (torchbench). Keeping them apart from the production packages under
// internal/ (as Go's own internal/testenv is) makes clear that no command
// or library path imports them.
package testenv
