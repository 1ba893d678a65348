#!/usr/bin/env bash
# Compares `brood session new` with `cp -a --reflink=auto` on the same 50,000-file source
# tree (copies of $GOROOT/src, cut to 50,000 files), in one run: warm page cache, a sync
# before every timed command (the sync is not timed), the two commands alternating so that
# load and disk throttling drift hit both; copies are deleted only at the end (freeing
# space on ext4 slows the writes that follow). Needs about 4 × ROUNDS × 600 MB on ext4. Prints the median of each and the ratio
# brood/cp (target ≤ 1.2), plus `--keep-base` (which only does work on reflink
# filesystems).
#
# Usage: scripts/bench-snapshot.sh [ext4|xfs|btrfs] [ROUNDS]
#   ext4 (default): the tree lives under /var/tmp (this machine's disk).
#   xfs, btrfs:     a 4 GiB loop image in /var/tmp (root; mkfs.xfs / mkfs.btrfs).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
fs="${1:-ext4}"
rounds="${2:-5}"
nfiles=50000

work="$(mktemp -d /var/tmp/brood-bench.XXXXXX)"
cleanup() {
  [ -x "$work/brood" ] && [ -n "${BROOD_STATE_DIR:-}" ] && rm_sessions || true
  if mountpoint -q "$work/mnt" 2>/dev/null; then umount "$work/mnt" || umount -l "$work/mnt"; fi
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/brood" ./cmd/brood
root="$work"
case "$fs" in
  ext4) ;;
  xfs|btrfs)
    truncate -s 4G "$work/fs.img"
    "mkfs.$fs" -q "$work/fs.img"
    mkdir "$work/mnt"
    mount -o loop "$work/fs.img" "$work/mnt"
    root="$work/mnt" ;;
  *) echo "usage: $0 [ext4|xfs|btrfs] [ROUNDS]" >&2; exit 2 ;;
esac

tree="$root/tree"
mkdir -p "$tree"
goroot="$(go env GOROOT)"
i=0
while [ "$(find "$tree" -type f | wc -l)" -lt "$nfiles" ]; do
  i=$((i + 1))
  cp -a "$goroot/src" "$tree/src$i"
done
find "$tree" -type f | LC_ALL=C sort | tail -n +$((nfiles + 1)) | xargs -r -d '\n' rm -f
files=$(find "$tree" -type f | wc -l)
bytes=$(du -sb --apparent-size "$tree" | cut -f1)

export BROOD_STATE_DIR="$root/state"
ms() { # runs "$@" quietly and prints its wall time in ms
  local s e
  sync
  s=$(date +%s%N)
  "$@" >/dev/null 2>&1
  e=$(date +%s%N)
  echo $(((e - s) / 1000000))
}
rm_sessions() {
  local d
  for d in "$BROOD_STATE_DIR"/sessions/*/; do
    [ -d "$d" ] && "$work/brood" session rm --force "$(basename "$d")" >/dev/null
  done
  return 0
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# Warm-up (page cache for the tree, binaries), not counted.
cp -a --reflink=auto "$tree" "$root/warm" && rm -rf "$root/warm"
"$work/brood" session new --workspace "$tree" >/dev/null 2>&1 && rm_sessions

cp_ms="" brood_ms="" base_ms=""
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    cp_ms+=" $(ms cp -a --reflink=auto "$tree" "$root/cp")"
    brood_ms+=" $(ms "$work/brood" session new --workspace "$tree")"
  else
    brood_ms+=" $(ms "$work/brood" session new --workspace "$tree")"
    cp_ms+=" $(ms cp -a --reflink=auto "$tree" "$root/cp")"
  fi
  base_ms+=" $(ms "$work/brood" session new --keep-base --workspace "$tree")"
  mv "$root/cp" "$root/cp.$r" # deleting here would slow the next round's writes
done

c=$(echo "$cp_ms" | median)
b=$(echo "$brood_ms" | median)
k=$(echo "$base_ms" | median)
echo "tree: $files files, $bytes bytes, on $fs ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "cp -a --reflink=auto          median ${c} ms   runs:${cp_ms}"
echo "brood session new             median ${b} ms   runs:${brood_ms}"
echo "brood session new --keep-base median ${k} ms   runs:${base_ms}"
awk -v b="$b" -v c="$c" -v k="$k" 'BEGIN {
  printf "ratio brood/cp = %.2f (target <= 1.20); with --keep-base %.2f\n", b / c, k / c }'
