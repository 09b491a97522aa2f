#!/bin/sh
# cut_points.sh: a recording stopped at any byte of its trace, killed
# (DIVTRACE_TEST_CUT_AT) or out of disk (DIVTRACE_TEST_ENOSPC_AT), leaves the
# bytes of an uncut run up to there, which show and diff read to the last
# step complete before the cut. Every block boundary, and inside each block
# the byte after its head, its middle and the byte before its CRC, and a
# seeded sample, for both models (at once, one
# core each), on a generated 8-image IDX set (fast, and no dataset needed).
set -u
DT=${DIVTRACE:-$(dirname "$0")/../../build/src/divtrace}
# the check program, built next to the program (the build tree's top)
BLOCKS=${CUT_BLOCKS:-$(dirname "$(dirname "$DT")")/tests/cut/blocks}
for p in "$DT" "$BLOCKS"; do
    if [ ! -x "$p" ]; then
        echo "cut_points.sh: $p is missing: build first (make check does)" >&2
        exit 99
    fi
done
T=$(mktemp -d "${TMPDIR:-/tmp}/divtrace-cut-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail=0
bad() {
    fail=$((fail + 1))
    [ $fail -le 30 ] && echo "FAIL - $1"
    return 0
}

# 8 images of 4x4 pixels: the autoencoder's input, PredNet's digits
mkdir "$T/data"
# (an IDX header: magic 0x803, 8 images, 4 rows, 4 columns; then seeded pixels)
printf %b "$(awk 'BEGIN { split("0 0 8 3 0 0 0 8 0 0 0 4 0 0 0 4", h); for (i = 1; i <= 16; i++) printf "\\0%03o", h[i]
    x = 7; for (i = 0; i < 128; i++) { x = (x * 69069 + 1) % 4294967296; printf "\\0%03o", int(x / 16777216) } }')" \
    >"$T/data/train-images-idx3-ubyte"

# read_ok FILE LEN K C COMPLETE WHAT: FILE, LEN bytes, is the reference's
# prefix and reads as K steps and C checkpoints (COMPLETE: with its footer)
read_ok() {
    f=$1 len=$2 k=$3 c=$4 complete=$5 what=$6
    size=$(wc -c <"$f")
    [ "$size" -eq "$len" ] || bad "$what: $size bytes, expected $len"
    cmp -s -n "$len" "$f" "$W/ref.dtr" || bad "$what: not the reference's first $len bytes"
    if [ "$len" -lt "$opsend" ]; then
        # no op list: unreadable, one line, exit 2
        "$DT" show --summary "$f" >"$W/out" 2>"$W/err"
        rc=$?
        [ $rc -eq 2 ] && [ "$(wc -l <"$W/err")" -eq 1 ] || bad "$what: show exit $rc ($(cat "$W/err")), expected 2 and one line"
        "$DT" diff "$f" "$W/ref.dtr" >"$W/out" 2>"$W/err"
        rc=$?
        [ $rc -eq 2 ] && [ "$(wc -l <"$W/err")" -eq 1 ] || bad "$what: diff exit $rc ($(cat "$W/err")), expected 2 and one line"
        return
    fi
    "$DT" show --summary "$f" >"$W/out" 2>"$W/err"
    rc=$?
    got=$(awk 'NR == 2 { st = ($2 == "complete" && NF == 2) ? "complete" : ($2 " " $3) }
        /^# steps [0-9]+, / { n = $3 + 0; ck = $9 + 0 } /^step / { last = $2 }
        END { printf "%s %s %s %s", n, ck, st, last }' "$W/out")
    want="$k $c cut short "
    [ "$complete" = 1 ] && want="$k $c complete "
    [ "$k" -gt 0 ] && want="$want$((k - 1))"
    [ $rc -eq 0 ] && [ ! -s "$W/err" ] && [ "$got" = "$want" ] ||
        bad "$what: show exit $rc, read '$got', expected '$want' $(head -c 300 "$W/err")"
    "$DT" diff "$f" "$W/ref.dtr" >"$W/out" 2>"$W/err"
    rc=$?
    if [ "$k" -eq 0 ]; then
        [ $rc -eq 2 ] && [ "$(wc -l <"$W/err")" -eq 1 ] && grep -q "holds no step" "$W/err" ||
            bad "$what: diff with no step: exit $rc ($(cat "$W/err")), expected 2 and 'holds no step'"
        return
    fi
    awk -v k="$k" -v s="$nsteps" '
        $0 == "identical: every op hash of all " k " common steps matches" { same = 1 }
        $0 == "identical: every op hash of all " k " common steps matches (A has " k " steps, B has " s ")" { same = 1; shorter = 1 }
        END { exit !(same && shorter == (k < s)) }' "$W/out" && [ $rc -eq 0 ] && [ ! -s "$W/err" ] ||
        bad "$what: diff exit $rc, not identical over $k of $nsteps steps: $(grep -v '^[AB]: ' "$W/out" | head -3) $(cat "$W/err")"
}

# walk NAME SEED RECORD...: the reference, then a record cut at every
# point; in $T/NAME, which ends with a file "result": points and failures
walk() {
    name=$1 seed=$2
    shift 2
    W=$T/$name
    mkdir "$W"
    if ! "$@" -o "$W/ref.dtr" 2>"$W/err" || ! "$BLOCKS" "$W/ref.dtr" >"$W/blocks"; then
        bad "$name: reference recording: $(cat "$W/err")"
        echo "0 $fail" >"$W/result"
        return
    fi
    total=$(wc -c <"$W/ref.dtr")
    opsend=$(awk '$3 == "OPS" { print $2 }' "$W/blocks")
    nsteps=$(awk '$3 == "STEP" { n++ } END { print n + 0 }' "$W/blocks")
    nckpt=$(awk '$3 == "CKPT" { n++ } END { print n + 0 }' "$W/blocks")
    [ "$nsteps" -ge 3 ] && [ "$nckpt" -ge 2 ] || bad "$name: the reference has $nsteps steps, $nckpt checkpoints"
    read_ok "$W/ref.dtr" "$total" "$nsteps" "$nckpt" 1 "$name reference"
    # Cut points: each block's first byte, after its head, its middle,
    # before its CRC, its end; and 8 more from a seeded generator. The plan, one line a cut point N: N, then K and C
    # (steps and checkpoints whose blocks end by N), then U, the end of the
    # last whole write by N (the header goes with the CONF block, the
    # trailer with the INDX block), and K and C by U.
    awk -v seed="$seed" -v total="$total" '
        { s[NR] = $1; e[NR] = $2; tag[NR] = $3
          pt[$1]; pt[$1 + 16]; pt[int(($1 + $2) / 2)]; pt[$2 - 4]; pt[$2] }
        END {
            x = seed
            for (i = 0; i < 8; i++) { x = (x * 69069 + 1) % 4294967296; pt[x % (total + 1)] }
            for (n in pt) {
                if (n + 0 < 0 || n + 0 > total) continue
                k = c = u = 0
                for (i = 1; i <= NR; i++) {
                    if (e[i] > n + 0) continue
                    if (tag[i] == "STEP") k++
                    if (tag[i] == "CKPT") c++
                    if (tag[i] != "HEAD" && tag[i] != "INDX" && e[i] > u) u = e[i]
                }
                ku = cu = 0
                for (i = 1; i <= NR; i++)
                    if (e[i] <= u) { ku += tag[i] == "STEP"; cu += tag[i] == "CKPT" }
                print n, k, c, u, ku, cu
            }
        }' "$W/blocks" | sort -n >"$W/plan"
    count=0
    while read -r n k c u ku cu; do
        count=$((count + 1))
        # killed once the file holds n bytes
        { DIVTRACE_TEST_CUT_AT=$n "$@" -o "$W/cut.dtr" </dev/null >/dev/null 2>"$W/err"; rc=$?; } 2>/dev/null
        [ $rc -eq 137 ] || bad "$name: DIVTRACE_TEST_CUT_AT=$n: exit $rc, not killed (137): $(head -c 300 "$W/err")"
        read_ok "$W/cut.dtr" "$n" "$k" "$c" $((n == total)) "$name killed at $n"
        # the disk full after n bytes
        DIVTRACE_TEST_ENOSPC_AT=$n "$@" -o "$W/full.dtr" </dev/null >/dev/null 2>"$W/err"
        rc=$?
        if [ "$n" -eq "$total" ]; then
            [ $rc -eq 0 ] && [ ! -s "$W/err" ] || bad "$name: DIVTRACE_TEST_ENOSPC_AT=$n (the whole trace): exit $rc"
            read_ok "$W/full.dtr" "$total" "$nsteps" "$nckpt" 1 "$name full at $n"
            continue
        fi
        line=$(cat "$W/err")
        case $line in
        "divtrace record: $W/full.dtr: "*"No space left on device")
            [ $rc -eq 2 ] && [ "$(wc -l <"$W/err")" -eq 1 ] ;;
        *) false ;;
        esac || bad "$name: DIVTRACE_TEST_ENOSPC_AT=$n: exit $rc, '$line'; expected 2 and one line naming the file and ENOSPC"
        read_ok "$W/full.dtr" "$u" "$ku" "$cu" 0 "$name full at $n"
    done <"$W/plan"
    echo "$name: $count cut points (kill) + $count (ENOSPC), $nsteps steps, $nckpt checkpoints, $total bytes"
    [ $fail -gt 30 ] && echo "$name: ... $((fail - 30)) more failures not shown"
    echo "$count $fail" >"$W/result"
}

D="--data $T/data --backend cpu --batch 1 --steps 4 --checkpoint-every 2"
walk autoencoder 1 "$DT" record -q $D --layers 16,4,16 >"$T/autoencoder.log" 2>&1 &
walk prednet 2 "$DT" record -q $D --model prednet --stack 1,2 --size 8x8 --nt 2 >"$T/prednet.log" 2>&1 &
wait
points=0
for name in autoencoder prednet; do
    cat "$T/$name.log"
    if read -r count f <"$T/$name/result"; then
        points=$((points + count))
        fail=$((fail + f))
    else
        echo "FAIL - $name: the walk did not finish"
        fail=$((fail + 1))
    fi
done
echo "cut points: $points (kill) + $points (ENOSPC), autoencoder and prednet"
echo "$fail failed"
[ $fail -eq 0 ]
