#!/usr/bin/env bash
# sync-goldens.sh [--check]: copy the shared test material the module's tests
# read (the paths in internal/testenv/shared/testdata/copies.txt: the goldens, two
# state-dict specs, the coco-tiny annotations) from ../shared, or from
# $SEGPIPE_SHARED, into internal/testenv/shared/testdata, so that those tests run on a
# clone alone (internal/testenv/shared serves them from there when ../shared is absent).
#
# --check copies nothing: it exits 1 when a copy is missing, differs from its
# source, or is not listed in copies.txt (what `go test ./internal/testenv/shared`
# also checks), and 2 when the shared material itself is absent.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=${SEGPIPE_SHARED:-../shared}
# A relative SEGPIPE_SHARED is relative to the module root, as in internal/testenv/shared.
[[ $src == /* ]] || src=$here/$src
dst=$here/internal/testenv/shared/testdata
check=0
case ${1-} in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
[[ -d $src ]] || { echo "sync-goldens: no shared material at $src" >&2; exit 2; }

mapfile -t units < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$dst/copies.txt")
status=0
for rel in "${units[@]}"; do
  case /$rel/ in
    */../* | */./* | //*) echo "sync-goldens: bad path '$rel' in copies.txt" >&2; exit 2 ;;
  esac
  [[ -e $src/$rel ]] || { echo "sync-goldens: $src/$rel absent" >&2; exit 2; }
  if ((check)); then
    diff -r -q "$src/$rel" "$dst/$rel" || status=1
  else
    rm -rf "${dst:?}/$rel"
    mkdir -p "$(dirname "$dst/$rel")"
    cp -R "$src/$rel" "$dst/$rel"
    chmod -R u+w,go-w "$dst/$rel"
  fi
done

# Anything else in testdata would be served by nobody and checked by nothing.
while IFS= read -r f; do
  rel=${f#"$dst"/}
  [[ $rel == README.md || $rel == copies.txt ]] && continue
  listed=0
  for u in "${units[@]}"; do
    [[ $rel == "$u" || $rel == "$u"/* ]] && { listed=1; break; }
  done
  ((listed)) || { echo "sync-goldens: $rel is not listed in copies.txt" >&2; status=1; }
done < <(find "$dst" -type f)

if ((check == 0 && status == 0)); then
  echo "sync-goldens: copied $(du -sh "$dst" | cut -f1) from $src into $dst"
fi
exit $status
