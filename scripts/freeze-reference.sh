#!/bin/sh
# Cut the frozen CPU reference of a release: writes
# testdata/frozen/RELEASE/reference.json (loader batch digests, the first 20
# training-step loss items of variant n at 128 px on the CPU backend, and the
# evaluation of the resulting weights, all for fixed seeds).
#
# Run it only when a release is cut, then set train.FrozenReference to
# RELEASE; between releases `go test ./trainer/train` holds the code to the
# newest set, so a change in the CPU reference shows up as a failing test.
set -eu
release=${1:?usage: scripts/freeze-reference.sh RELEASE (e.g. 0.2.0)}
cd "$(dirname "$0")/.."
if [ -e "testdata/frozen/$release" ]; then
	echo "testdata/frozen/$release exists: a release's reference is never rewritten" >&2
	exit 1
fi
SEGPIPE_FREEZE="$release" go test ./trainer/train -run '^TestFrozenReference$' -count=1 -v
echo "now set FrozenReference = \"$release\" in trainer/train/frozen.go"
