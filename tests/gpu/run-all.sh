#!/bin/bash
# run-all.sh: every GPU test and benchmark of divtrace in one run on the GPU
# machine, from the folder tests/gpu/pack.sh made here (the GPU machine has
# the CUDA, cuBLAS, cuDNN, OpenBLAS, MPFR and GMP run-time libraries, but no
# compiler toolchain for this project, no CMocka and no data set). Writes the
# whole log and one file per test under OUTDIR, and prints a summary table
# last, then a line of counts; exits 1 when a check failed.
# Usage: tests/gpu/run-all.sh [PACKED [OUTDIR]]
#   (on the device tool: tests/gpu/run-all.sh build-gpu "$OUT")
# ONLY=REGEX runs only the checks whose names match (grep -E), for a
# short call that tries a few of them again.
set -u
P=$(cd "${1:-build-gpu}" && pwd)
O=${2:-${OUT:-/tmp/divtrace-gpu}}
mkdir -p "$O"
T=$(mktemp -d "${TMPDIR:-/tmp}/divtrace-gpu-XXXXXX")
L=$T/logs
mkdir -p "$L"
export TMPDIR=$T
export LD_LIBRARY_PATH="$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# cuDNN may live in the Python wheels rather than the toolkit's folder
if ! ldconfig -p | grep -q 'libcudnn.so.9 '; then
    d=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null)
    [ -n "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
fi
export DIVTRACE_DATA="$P/data"
DT="$P/bin/divtrace"
SUMMARY="$O/summary.md"
: >"$SUMMARY"
exec > >(tee "$O/gpu-log.txt") 2>&1

note() { printf '| %s | %s | %s |\n' "$1" "$2" "$3" >>"$SUMMARY"; }
# check NAME WANT-EXIT -- COMMAND...: run, log, record PASS/FAIL with the time
check() {
    name=$1 want=$2
    shift 3
    if [ -n "${ONLY:-}" ] && ! printf '%s\n' "$name" | grep -Eq -- "$ONLY"; then
        return 0
    fi
    s=$(date +%s.%N)
    "$@" >"$L/$name.log" 2>&1
    rc=$?
    e=$(date +%s.%N)
    t=$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.1f s", e - s }')
    if [ "$rc" -eq "$want" ]; then r=PASS; elif [ "$rc" -eq 77 ]; then r=SKIP; else r="FAIL (exit $rc)"; fi
    note "$name" "$r" "$t"
    echo "== $name: $r"
    tail -n 30 "$L/$name.log"
}
# same_algos TRACE STEP: a replay of TRACE runs the convolution algorithms
# its header records (cuDNN's report of each choice against cudnn_algos)
same_algos() {
    DIVTRACE_CUDNN_REPORT=1 "$DT" replay "$1" --step "$2" -q 2>"$T/algos.err"
    grep -o '^cudnn-report: [a-z_]* [^:]*: chosen [A-Za-z_0-9.=-]*' "$T/algos.err" |
        sed 's/^cudnn-report: //; s/: chosen / /' | sort >"$T/algos.replay"
    "$DT" show --summary "$1" | sed -n 's/^# cudnn_algos = //p' | tr ';' '\n' |
        sed 's/^ *//; s/ det$//; s/ nondet$//' | sort >"$T/algos.rec"
    echo "recorded:"; cat "$T/algos.rec"; echo "replayed:"; cat "$T/algos.replay"
    [ -s "$T/algos.rec" ] && cmp -s "$T/algos.rec" "$T/algos.replay"
}
# members_same CLEAN FAULTED: with L1.t03.conv_i scaled in FAULTED, the
# other three gate convolutions of its set are bit for bit CLEAN's at step 0
op_hash() { "$DT" show "$1" --step 0 | awk -v op="$2" '$3 == op { print $1 }'; }
members_same() {
    for o in L1.t03.conv_f L1.t03.conv_o L1.t03.conv_c; do
        echo "$o: $(op_hash "$1" $o) $(op_hash "$2" $o)"
        [ -n "$(op_hash "$1" $o)" ] && [ "$(op_hash "$1" $o)" = "$(op_hash "$2" $o)" ] || return 1
    done
    echo "L1.t03.conv_i: $(op_hash "$1" L1.t03.conv_i) $(op_hash "$2" L1.t03.conv_i)"
    [ "$(op_hash "$1" L1.t03.conv_i)" != "$(op_hash "$2" L1.t03.conv_i)" ]
}
# loss_is_record TRACE OP STEPS: each of the STEPS steps of TRACE has in its
# summary the loss its op OP's record holds (one element: its L2 norm is the
# loss), the same float32 (printed to 9 and 10 digits: they agree to 2e-8,
# while two float32 values differ by at least 6e-8 of either). A loss read
# from another step's buffer, or before its step ended, differs.
loss_is_record() {
    "$DT" show "$1" | awk -v op="$2" -v want="$3" '
        /^step [0-9]+ +loss / { step = $2; loss = $4; next }
        $3 == op && $2 == step {
            n++
            d = loss - $NF; if (d < 0) d = -d
            a = loss < 0 ? -loss : loss
            if (d > 2e-8 * a) { bad++; if (bad <= 5) print "step " step ": summary loss " loss ", " op " record " $NF }
        }
        END { print n + 0 " steps checked, " bad + 0 " differ"; exit !(n == want && bad == 0) }'
}
# grep_in NAME PATTERN WHAT: the log of NAME has PATTERN
grep_in() {
    [ -e "$L/$1.log" ] || return 0 # not run (ONLY)
    if grep -Eq -- "$2" "$L/$1.log"; then note "$1: $3" PASS ""; else note "$1: $3" FAIL ""; fi
}

echo "## divtrace GPU run, $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$DT" --version
R="$DT record -q --data $DIVTRACE_DATA"

# --- unit tests of the GPU code (CMocka, built here, run there)
# the CPU kernels under every instruction set this CPU runs (AVX-512 here)
check test_cpu_gemm 0 -- "$P/bin/test_cpu_gemm"
check test_stats 0 -- "$P/bin/test_stats"
check test_conv_cache 0 -- "$P/bin/test_conv_cache"
check test_conv 0 -- "$P/bin/test_conv"
check test_image_ops 0 -- "$P/bin/test_image_ops"
check test_tracer_async 0 -- "$P/bin/test_tracer_async"
check test_tracer_defer 0 -- "$P/bin/test_tracer_defer"
check test_gpu_trace 0 -- "$P/bin/test_gpu_trace"
check test_gpu_trace_paths 0 -- "$P/bin/test_gpu_trace_paths"
check test_gpu_ops_cuda 0 -- env DIVTRACE_GPU_BACKEND=cuda "$P/bin/test_gpu_ops"
check test_gpu_ops_cudnn 0 -- env DIVTRACE_GPU_BACKEND=cudnn "$P/bin/test_gpu_ops"
check test_gpu_ops_cuda_atomic 0 -- env DIVTRACE_GPU_BACKEND=cuda DIVTRACE_GPU_REDUCE=atomic "$P/bin/test_gpu_ops"
check test_gpu_dnn 0 -- "$P/bin/test_gpu_dnn"
check test_lib_gpu 0 -- "$P/bin/test_lib_gpu"

# --- determinism and nondeterminism, autoencoder (200 steps)
A="$R --steps 200"
check ae_cuda_tree_a 0 -- $A --backend cuda -o "$T/ct1.dtr"
check ae_cuda_tree_b 0 -- $A --backend cuda -o "$T/ct2.dtr"
check ae_cuda_tree_identical 0 -- "$DT" diff "$T/ct1.dtr" "$T/ct2.dtr"
check ae_cudnn_det_a 0 -- $A --backend cudnn -o "$T/cd1.dtr"
check ae_cudnn_det_b 0 -- $A --backend cudnn -o "$T/cd2.dtr"
check ae_cudnn_det_identical 0 -- "$DT" diff "$T/cd1.dtr" "$T/cd2.dtr"
check ae_cuda_atomic_a 0 -- $A --backend cuda --reduce atomic -o "$T/ca1.dtr"
check ae_cuda_atomic_b 0 -- $A --backend cuda --reduce atomic -o "$T/ca2.dtr"
check ae_cuda_atomic_diverge 1 -- "$DT" diff "$T/ca1.dtr" "$T/ca2.dtr"
grep_in ae_cuda_atomic_diverge "origin ops" "names origin ops"
# the bias gradients themselves differ from the tree's order, not only the loss
check ae_cuda_atomic_vs_tree 1 -- "$DT" diff "$T/ct1.dtr" "$T/ca1.dtr"
grep_in ae_cuda_atomic_vs_tree "b\.grad" "a bias gradient is where they part"
check ae_cpu 0 -- $A -o "$T/cpu.dtr"
check ae_cpu_vs_cuda 1 -- "$DT" diff "$T/cpu.dtr" "$T/ct1.dtr"
if [ -e "$L/ae_cpu_vs_cuda.log" ]; then # (run: not left out by ONLY)
    if grep -q "op lists differ" "$L/ae_cpu_vs_cuda.log"; then note "ae_cpu_vs_cuda: op lists align" FAIL ""; else note "ae_cpu_vs_cuda: op lists align" PASS ""; fi
fi
# the autoencoder has no image ops: cudnn runs exactly the cuda kernels
check ae_cuda_vs_cudnn_same 0 -- "$DT" diff "$T/ct1.dtr" "$T/cd1.dtr"
check ae_cuda_replay_oracle 0 -- "$DT" replay "$T/ct1.dtr" --step 150 --against mpfr
grep_in ae_cuda_replay_oracle " 0 SEMANTIC" "no SEMANTIC op"
check ae_cuda_replay_same 0 -- "$DT" replay "$T/ct1.dtr" --step 150 --steps 3
# every op launched on its own (no CUDA graph) gives the same trace
check ae_cuda_nograph 0 -- $A --backend cuda --cuda-graph off -o "$T/cn.dtr"
check ae_cuda_graph_vs_nograph 0 -- "$DT" diff "$T/ct1.dtr" "$T/cn.dtr"
# a step's records made while the next step runs (no checkpoint between
# steps to take them early) give the same trace, with a bit flipped in a
# parameter (the flip waits for the records still being made) as well
check ae_cuda_overlap 0 -- $A --backend cuda --checkpoint-every 1000 -o "$T/co.dtr"
check ae_cuda_overlap_header 0 -- sh -c "'$DT' show --summary '$T/co.dtr' | grep -E '^# trace_overlap = on .* on [0-9]+ SMs\)$'"
check ae_cuda_overlap_same 0 -- "$DT" diff "$T/ct1.dtr" "$T/co.dtr"
# step s + 1 is queued before step s's loss is read: each summary holds its
# own step's loss, with checkpoints (ct1: the steps before them are not
# overlapped) and without (co); and a run that waits for every step
# (--stop-on-nonfinite, no NaN here) gives the same trace
check ae_cuda_loss_is_record 0 -- loss_is_record "$T/ct1.dtr" loss.mse 200
check ae_cuda_loss_is_record_b 0 -- loss_is_record "$T/co.dtr" loss.mse 200
check ae_cuda_stepwise 0 -- $A --backend cuda --stop-on-nonfinite -o "$T/csw.dtr"
check ae_cuda_stepwise_same 0 -- "$DT" diff "$T/ct1.dtr" "$T/csw.dtr"
check ae_cuda_stepwise_loss 0 -- loss_is_record "$T/csw.dtr" loss.mse 200
# the trace kernels kept to a green context of 16 SMs (DIVTRACE_TRACE_SMS): the same records
check ae_cuda_trace_sms 0 -- env DIVTRACE_TRACE_SMS=16 $A --backend cuda --checkpoint-every 1000 -o "$T/cg.dtr"
check ae_cuda_trace_sms_header 0 -- sh -c "'$DT' show --summary '$T/cg.dtr' | grep -E '^# trace_overlap = on .* on 16 SMs\)'"
check ae_cuda_trace_sms_same 0 -- "$DT" diff "$T/ct1.dtr" "$T/cg.dtr"
# ... and on every SM (DIVTRACE_TRACE_SMS=all; the default is half of them)
check ae_cuda_trace_all 0 -- env DIVTRACE_TRACE_SMS=all $A --backend cuda --checkpoint-every 1000 -o "$T/cga.dtr"
check ae_cuda_trace_all_header 0 -- sh -c "'$DT' show --summary '$T/cga.dtr' | grep -E '^# trace_overlap = on \(a step.s records are made while the next step runs\)$'"
check ae_cuda_trace_all_same 0 -- "$DT" diff "$T/ct1.dtr" "$T/cga.dtr"
check ae_cuda_trace_sms_bad 0 -- env DIVTRACE_TRACE_SMS=x $R --steps 20 --backend cuda --checkpoint-every 1000 -o "$T/cgx.dtr"
grep_in ae_cuda_trace_sms_bad "^DIVTRACE_TRACE_SMS='x': expected 1 to [0-9]+ SMs" "a value that is not a count is named"
# (a flipped bit is a carry fault: record exits 1)
check ae_cuda_overlap_flip 1 -- $A --backend cuda --checkpoint-every 1000 --flip-bit 77:enc1.W:5:30 -o "$T/cof.dtr"
grep_in ae_cuda_overlap_flip "step 77: carry fault: enc1\.W is not what enc1\.W\.update wrote in step 76" "names the carry fault"
check ae_cuda_nograph_flip 1 -- $A --backend cuda --cuda-graph off --flip-bit 77:enc1.W:5:30 -o "$T/cnf.dtr"
check ae_cuda_overlap_flip_same 0 -- "$DT" diff "$T/cof.dtr" "$T/cnf.dtr"
check ae_cuda_overlap_flip_differs 1 -- "$DT" diff "$T/co.dtr" "$T/cof.dtr"
# ops on one stream give the same trace as ops spread over four
check ae_cuda_streams1 0 -- $A --backend cuda --streams 1 -o "$T/cs1.dtr"
check ae_cuda_streams1_same 0 -- "$DT" diff "$T/ct1.dtr" "$T/cs1.dtr"
# a fault planted in one op of a GPU run is SEMANTIC there, and only there
check ae_cuda_inject 0 -- $R --steps 20 --backend cuda --inject dec1.matmul:scale -o "$T/cf.dtr"
check ae_cuda_inject_replay 1 -- "$DT" replay "$T/cf.dtr" --step 10 --against mpfr
grep_in ae_cuda_inject_replay "^ +[0-9]+  dec1\.matmul +matmul .* SEMANTIC$" "the planted op is SEMANTIC"
grep_in ae_cuda_inject_replay "summary: .* 1 SEMANTIC$" "and no other"

# memory the device does not have: one line and exit 2, no trace
check ae_cuda_oom 2 -- $R --backend cuda --steps 1 --layers 784,1048576,65536,784 -o "$T/oom.dtr"
grep_in ae_cuda_oom "^divtrace record: out of memory: the cuda backend could not allocate " "says what it could not allocate"
check ae_cuda_oom_no_trace 0 -- sh -c "[ ! -e '$T/oom.dtr' ]"

# --- explain: GPU traces against cpu ones and against each other; state
# faults on the GPU, with the step's records made while the next step runs
# (--checkpoint-every 1000) and step by step
check ex_ae_cpu_vs_cuda 0 -- "$DT" explain "$T/cpu.dtr" "$T/ct1.dtr"
grep_in ex_ae_cpu_vs_cuda "^rounding only: .*backend cpu \| cuda" "rounding only, the backend named"
check ex_ae_cpu_vs_cudnn 0 -- "$DT" explain "$T/cpu.dtr" "$T/cd1.dtr"
grep_in ex_ae_cpu_vs_cudnn "^rounding only: .*backend cpu \| cudnn" "rounding only, the backend named"
check ex_ae_cuda_identical 0 -- "$DT" explain "$T/ct1.dtr" "$T/ct2.dtr"
grep_in ex_ae_cuda_identical "^identical$" "identical"
check ex_ae_cuda_atomic 0 -- "$DT" explain "$T/ca1.dtr" "$T/ca2.dtr"
grep_in ex_ae_cuda_atomic "^rounding only" "atomics: rounding only"
check ae_cuda_rt_overlap 1 -- $A --backend cuda --checkpoint-every 1000 --inject '*.W:roundtrip:bf16' -o "$T/crt.dtr"
check ex_ae_cuda_rt_overlap 1 -- "$DT" explain "$T/co.dtr" "$T/crt.dtr"
grep_in ex_ae_cuda_rt_overlap "^bug in B: enc1\.W changed between steps 0 and 1 .*enc1\.W\.update" "the round trip named"
check ae_cudnn_rt_half 1 -- $A --backend cudnn --inject '*.b:roundtrip:half' -o "$T/cdrt.dtr"
check ex_ae_cudnn_rt_half 1 -- "$DT" explain "$T/cd1.dtr" "$T/cdrt.dtr"
grep_in ex_ae_cudnn_rt_half "^bug in B: enc1\.b changed between steps 0 and 1" "the round trip named"
check ae_cuda_stale 1 -- $A --backend cuda --inject 'dec1.W:stale' -o "$T/cst.dtr"
check ex_ae_cuda_stale 1 -- "$DT" explain "$T/ct1.dtr" "$T/cst.dtr"
grep_in ex_ae_cuda_stale "^bug in B: dec1\.W changed between steps 0 and 1" "the stale copy named"
check ex_ae_cpu_vs_cuda_rt 1 -- "$DT" explain "$T/cpu.dtr" "$T/crt.dtr"
grep_in ex_ae_cpu_vs_cuda_rt "^bug in B: enc1\.W changed" "against a cpu run too"

# --- PredNet (small: 1,8,16 at 64x64, nt 10, batch 2, 10 steps)
Q="$R --model prednet --stack 1,8,16 --size 64x64 --nt 10 --batch 2 --steps 10"
check pn_cudnn_det_a 0 -- $Q --backend cudnn -o "$T/pd1.dtr"
check pn_cudnn_det_b 0 -- $Q --backend cudnn -o "$T/pd2.dtr"
check pn_cudnn_det_identical 0 -- "$DT" diff "$T/pd1.dtr" "$T/pd2.dtr"
check pn_cudnn_streams_header 0 -- sh -c "'$DT' show --summary '$T/pd1.dtr' | grep -E '^# gpu_streams = 4 \(([2-4]) used'"
check pn_cudnn_overlap 0 -- $Q --backend cudnn --checkpoint-every 100 -o "$T/po.dtr"
check pn_cudnn_overlap_same 0 -- "$DT" diff "$T/pd1.dtr" "$T/po.dtr"
check pn_cudnn_loss_is_record 0 -- loss_is_record "$T/po.dtr" loss 10
check pn_cudnn_trace_sms 0 -- env DIVTRACE_TRACE_SMS=8 $Q --backend cudnn --checkpoint-every 100 -o "$T/pg.dtr"
check pn_cudnn_trace_sms_same 0 -- "$DT" diff "$T/pd1.dtr" "$T/pg.dtr"
check pn_cudnn_streams1 0 -- $Q --backend cudnn --streams 1 -o "$T/ps1.dtr"
check pn_cudnn_streams1_same 0 -- "$DT" diff "$T/pd1.dtr" "$T/ps1.dtr"
check pn_cudnn_streams8_nograph 0 -- $Q --backend cudnn --streams 8 --cuda-graph off -o "$T/ps8.dtr"
check pn_cudnn_streams8_same 0 -- "$DT" diff "$T/pd1.dtr" "$T/ps8.dtr"
# grouped convolutions (gpu_dnn_fuse.cu): each set of four gate convolutions
# and each set of their filter gradients run as one call; against the
# same run without groups, explain finds rounding only (every op of the
# first divergent step held to the oracle), and a fault planted in the
# first member of a set leaves the other members' outputs bit for bit
check pn_cudnn_grouped_header 0 -- sh -c "'$DT' show --summary '$T/pd1.dtr' | grep -E '^# cudnn_grouped = [1-9][0-9]* forward, [1-9][0-9]* filter-gradient and 0 data-gradient sets'"
check pn_cudnn_ungrouped 0 -- env DIVTRACE_CUDNN_FUSE=0 $Q --backend cudnn -o "$T/pu.dtr"
check pn_cudnn_ungrouped_header 0 -- sh -c "'$DT' show --summary '$T/pu.dtr' | grep -E '^# cudnn_grouped = 0 forward, 0 filter-gradient and 0 data-gradient sets .*DIVTRACE_CUDNN_FUSE=0'"
check ex_pn_grouped_vs_not 0 -- "$DT" explain "$T/pu.dtr" "$T/pd1.dtr"
grep_in ex_pn_grouped_vs_not "^(rounding only|identical)" "rounding only"
# every set grouped without timing; the gates' data gradients are one op
# (a sum, one call of the stacked shape) and no other two share an input,
# so PredNet has no data-gradient set (test_gpu_dnn groups some)
check pn_cudnn_grouped_all_a 0 -- env DIVTRACE_CUDNN_FUSE=all $Q --backend cudnn -o "$T/pa1.dtr"
check pn_cudnn_grouped_all_b 0 -- env DIVTRACE_CUDNN_FUSE=all $Q --backend cudnn --streams 8 --cuda-graph off -o "$T/pa2.dtr"
check pn_cudnn_grouped_all_same 0 -- "$DT" diff "$T/pa1.dtr" "$T/pa2.dtr"
check pn_cudnn_grouped_all_header 0 -- sh -c "'$DT' show --summary '$T/pa1.dtr' | grep -E '^# cudnn_grouped = [1-9][0-9]* forward, [1-9][0-9]* filter-gradient and 0 data-gradient sets'"
check pn_cudnn_grouped_all_replay 0 -- "$DT" replay "$T/pa1.dtr" --step 5 --against mpfr
grep_in pn_cudnn_grouped_all_replay " 0 SEMANTIC" "no SEMANTIC op"
check pn_cudnn_grouped_all_algos 0 -- same_algos "$T/pa1.dtr" 5
check ex_pn_grouped_all_vs_not 0 -- "$DT" explain "$T/pu.dtr" "$T/pa1.dtr"
grep_in ex_pn_grouped_all_vs_not "^(rounding only|identical)" "rounding only"
check pn_cudnn_lead_fault 0 -- $Q --backend cudnn --inject L1.t03.conv_i:scale:1.5 -o "$T/plf.dtr"
check pn_cudnn_lead_fault_members 0 -- members_same "$T/pd1.dtr" "$T/plf.dtr"
check pn_cuda_streams1 0 -- $Q --backend cuda --streams 1 -o "$T/pcs1.dtr"
check pn_cuda_tree_a 0 -- $Q --backend cuda -o "$T/pc1.dtr"
check pn_cuda_tree_b 0 -- $Q --backend cuda -o "$T/pc2.dtr"
check pn_cuda_tree_identical 0 -- "$DT" diff "$T/pc1.dtr" "$T/pc2.dtr"
check pn_cuda_streams1_same 0 -- "$DT" diff "$T/pc1.dtr" "$T/pcs1.dtr"
# atomic reductions at batch 2 (every sum cut into up to 64 partial sums
# added in arrival order): two runs differ from the tree run and from each
# other, within rounding; nothing is reported as unable to vary
check pn_cuda_atomic_a 0 -- $Q --backend cuda --reduce atomic -o "$T/pa1.dtr"
check pn_cuda_atomic_b 0 -- $Q --backend cuda --reduce atomic -o "$T/pa2.dtr"
check pn_cuda_atomic_vs_tree 1 -- "$DT" diff "$T/pc1.dtr" "$T/pa1.dtr"
check pn_cuda_atomic_vary 1 -- "$DT" diff "$T/pa1.dtr" "$T/pa2.dtr"
check ex_pn_cuda_atomic 0 -- "$DT" explain "$T/pa1.dtr" "$T/pa2.dtr"
grep_in ex_pn_cuda_atomic "^rounding only" "atomics: rounding only"
check pn_cuda_atomic_no_fixed 0 -- sh -c "! '$DT' show --summary '$T/pa1.dtr' | grep -q reduce_fixed"
# the paper's protocol sizes (batch 1): atomic runs vary there too
PP="$R --model prednet --nt 20 --batch 1 --steps 3"
check pn_paper_cudnn_atomic_a 0 -- $PP --backend cudnn --reduce atomic -o "$T/ppa1.dtr"
check pn_paper_cudnn_atomic_b 0 -- $PP --backend cudnn --reduce atomic -o "$T/ppa2.dtr"
check pn_paper_cudnn_atomic_vary 1 -- "$DT" diff "$T/ppa1.dtr" "$T/ppa2.dtr"
# the autoencoder at batch 2: every bias gradient sums two rows, which no
# order changes; record says so, the header lists them, and the atomic run
# equals the tree run bit for bit
B="$DT record --data $DIVTRACE_DATA --steps 20 --batch 2 --backend cuda"
check ae_b2_tree 0 -- $B -o "$T/b2t.dtr"
check ae_b2_atomic 0 -- $B --reduce atomic -o "$T/b2a.dtr"
grep_in ae_b2_atomic "^divtrace record: --reduce atomic cannot vary 4 sums of at most two terms \([a-z0-9]+\.b\.grad, " "record says which sums cannot vary"
check ae_b2_atomic_header 0 -- sh -c "'$DT' show --summary '$T/b2a.dtr' | grep -E '^# reduce_fixed = 4: '"
check ae_b2_atomic_same 0 -- "$DT" diff "$T/b2t.dtr" "$T/b2a.dtr"
# the fastest mode: its timed choice may be deterministic for every op of a
# shape that small, so atomics make the two runs vary whatever it chooses
check pn_cudnn_fastest_a 0 -- $Q --backend cudnn --cudnn-algo fastest --reduce atomic -o "$T/pf1.dtr"
check pn_cudnn_fastest_b 0 -- $Q --backend cudnn --cudnn-algo fastest --reduce atomic -o "$T/pf2.dtr"
check pn_cudnn_fastest_diff 1 -- "$DT" diff "$T/pf1.dtr" "$T/pf2.dtr"
# a replay of a fastest run runs the algorithms it recorded, not a new search
check pn_cudnn_fastest_replay_algos 0 -- same_algos "$T/pf1.dtr" 5
check pn_cudnn_fastest_replay_algos_b 0 -- same_algos "$T/pf2.dtr" 5
check pn_cudnn_bwdfilter0_a 0 -- $Q --backend cudnn --cudnn-algo 0 -o "$T/p01.dtr"
check pn_cudnn_bwdfilter0_b 0 -- $Q --backend cudnn --cudnn-algo 0 -o "$T/p02.dtr"
check pn_cudnn_bwdfilter0_diff 1 -- "$DT" diff "$T/p01.dtr" "$T/p02.dtr"
check pn_cpu 0 -- $Q -o "$T/pcpu.dtr"
check pn_cpu_vs_cudnn 1 -- "$DT" diff "$T/pcpu.dtr" "$T/pd1.dtr"
grep_in pn_cpu_vs_cudnn "^first divergence: step 0, layer L[0-9]+, time step [0-9]+" "names layer and time step"
check pn_cudnn_replay_oracle 0 -- "$DT" replay "$T/pd1.dtr" --step 5 --against mpfr
grep_in pn_cudnn_replay_oracle " 0 SEMANTIC" "no SEMANTIC op"
# transform algorithms (algorithm 5: forward FFT_TILING, both backward
# WINOGRAD_NONFUSED) spread rounding over a whole output: replay holds those
# ops to the normwise bound and says so, and still finds a planted fault
check pn_cudnn_transform 0 -- $Q --backend cudnn --cudnn-algo 5 -o "$T/pt.dtr"
check pn_cudnn_transform_replay 0 -- "$DT" replay "$T/pt.dtr" --step 5 --against mpfr --all
grep_in pn_cudnn_transform_replay "conv2d .*\(normwise bound: FFT_TILING\)$" "forward convolutions marked"
grep_in pn_cudnn_transform_replay "conv2d_bwd_filter .*\(normwise bound: WINOGRAD_NONFUSED\)$" "filter gradients marked"
grep_in pn_cudnn_transform_replay " 0 SEMANTIC" "no SEMANTIC op"
check pn_cudnn_transform_inject 1 -- "$DT" replay "$T/pt.dtr" --step 5 --against mpfr --inject L1.t05.conv_i:scale:1.1
grep_in pn_cudnn_transform_inject "^ +[0-9]+  L1\.t05\.conv_i +conv2d .* SEMANTIC \(normwise bound: FFT_TILING\)$" "the planted op is SEMANTIC"
grep_in pn_cudnn_transform_inject "summary: .* 1 SEMANTIC$" "and no other"
# --cudnn-algo deterministic-fast (cuDNN's backend API engines, chosen by
# its heuristics): the same bits every run; a replay rebuilds the recorded
# engines, holds their ops to the normwise bound (the filter gradients'
# engine is a Winograd one that cuDNN's notes do not mark), finds no
# SEMANTIC op, and still finds a planted fault
check pn_cudnn_detfast_a 0 -- $Q --backend cudnn --cudnn-algo deterministic-fast -o "$T/pe1.dtr"
check pn_cudnn_detfast_b 0 -- $Q --backend cudnn --cudnn-algo deterministic-fast -o "$T/pe2.dtr"
check pn_cudnn_detfast_identical 0 -- "$DT" diff "$T/pe1.dtr" "$T/pe2.dtr"
check pn_cudnn_detfast_header 0 -- sh -c "'$DT' show --summary '$T/pe1.dtr' | grep -E '^# cudnn_algos = .*ENGINE[0-9]+[^;]* det'"
check pn_cudnn_detfast_algos 0 -- same_algos "$T/pe1.dtr" 5
check pn_cudnn_detfast_replay 0 -- "$DT" replay "$T/pe1.dtr" --step 5 --against mpfr --all
grep_in pn_cudnn_detfast_replay "conv2d_bwd_filter .*\(normwise bound: ENGINE[0-9]" "engine ops marked"
grep_in pn_cudnn_detfast_replay " 0 SEMANTIC" "no SEMANTIC op"
check pn_cudnn_detfast_inject 1 -- "$DT" replay "$T/pe1.dtr" --step 5 --against mpfr --inject L1.t05.conv_i:scale:1.1
grep_in pn_cudnn_detfast_inject "^ +[0-9]+  L1\.t05\.conv_i +conv2d .* SEMANTIC" "the planted op is SEMANTIC"

# explain on PredNet: cpu against cudnn, two fastest runs, state carried
# across sequences on cudnn, Adam's moments through a truncating copy on cuda
check ex_pn_cpu_vs_cudnn 0 -- "$DT" explain "$T/pcpu.dtr" "$T/pd1.dtr"
grep_in ex_pn_cpu_vs_cudnn "^rounding only: .*backend cpu \| cudnn" "rounding only, the backend named"
check ex_pn_cpu_vs_detfast 0 -- "$DT" explain "$T/pcpu.dtr" "$T/pe1.dtr"
grep_in ex_pn_cpu_vs_detfast "^rounding only" "rounding only"
check ex_pn_cuda_vs_cudnn 0 -- "$DT" explain "$T/pc1.dtr" "$T/pd1.dtr"
grep_in ex_pn_cuda_vs_cudnn "^rounding only: .*backend cuda \| cudnn" "rounding only"
check ex_pn_fastest 0 -- "$DT" explain "$T/pf1.dtr" "$T/pf2.dtr"
grep_in ex_pn_fastest "^rounding only" "nondeterministic algorithms: rounding only"
check pn_cudnn_carry 0 -- $Q --backend cudnn --inject 'L*.init.*:carry' -o "$T/pcarry.dtr"
check ex_pn_cudnn_carry 1 -- "$DT" explain "$T/pd1.dtr" "$T/pcarry.dtr"
grep_in ex_pn_cudnn_carry "^bug in B: op L0\.init\.r \(step 1, layer L0\) computes wrong values" "the carried state named"
check pn_cuda_rt_trunc 1 -- $Q --backend cuda --checkpoint-every 100 --inject '*.m:roundtrip:trunc' -o "$T/prt.dtr"
check ex_pn_cuda_rt_trunc 1 -- "$DT" explain "$T/pc1.dtr" "$T/prt.dtr"
grep_in ex_pn_cuda_rt_trunc "^bug in B: L0\.conv_i\.W\.m changed between steps 0 and 1" "the round trip named"

# --- examples for the README (EXAMPLES=1): the default autoencoder run on
# cpu and on cuda, and the 2021 PredNet protocol on cudnn in its
# deterministic and fastest modes
if [ "${EXAMPLES:-0}" = 1 ]; then
    E="$DT record --data $DIVTRACE_DATA"
    check ex_ae_cpu 0 -- $E -o "$T/ex_cpu.dtr"
    check ex_ae_cuda 0 -- $E --backend cuda -o "$T/ex_cuda.dtr"
    check ex_ae_cpu_vs_cuda 1 -- "$DT" diff "$T/ex_cpu.dtr" "$T/ex_cuda.dtr"
    check ex_pn_det 0 -- $E --model prednet --protocol paper --backend cudnn -o "$T/ex_pd.dtr"
    check ex_pn_fastest 0 -- $E --model prednet --protocol paper --backend cudnn --cudnn-algo fastest -o "$T/ex_pf.dtr"
    check ex_pn_det_vs_fastest 1 -- "$DT" diff "$T/ex_pd.dtr" "$T/ex_pf.dtr"
    check ex_pn_replay 0 -- "$DT" replay "$T/ex_pf.dtr" --step 100 --against mpfr
fi

# --- benchmarks (QUICK=1: short ones, no PyTorch)
if [ "${QUICK:-0}" = 1 ]; then
    check bench_gpu_hash 0 -- "$P/bin/bench_gpu_hash" --quick
    check bench_gpu_fused_hash 0 -- "$P/bin/bench_gpu_fused_hash" --quick
    check bench_gpu_leaf_layout 0 -- "$P/bin/bench_gpu_leaf_layout" 256
    check bench_gpu_step 0 -- "$P/bin/bench_gpu_step" --quick
    check bench_lib_step 0 -- "$P/bin/bench_lib_step" 500
else
    check bench_gpu_hash 0 -- "$P/bin/bench_gpu_hash"
    check bench_gpu_fused_hash 0 -- "$P/bin/bench_gpu_fused_hash"
    check bench_gpu_leaf_layout 0 -- "$P/bin/bench_gpu_leaf_layout"
    check bench_gpu_step 0 -- "$P/bin/bench_gpu_step"
    check bench_lib_step 0 -- "$P/bin/bench_lib_step"
    check bench_cudnn_engines 0 -- "$P/bin/bench_cudnn_engines"
    check torch_compare 0 -- sh "$P/torch_compare.sh" "$O/torch_compare.md"
fi

echo
echo "## summary"
echo "| check | result | time |"
echo "| --- | --- | --- |"
cat "$SUMMARY"
tar -C "$T" -czf "$O/logs.tar.gz" logs
rm -rf "$T"
# a failed check is a finding: say how many, and exit 1 (the device tool
# returns only a few files, so the count must reach its output)
nfail=$(grep -c '| FAIL' "$SUMMARY")
npass=$(grep -c '| PASS' "$SUMMARY")
echo "run-all: $npass passed, $nfail failed"
[ "$nfail" -eq 0 ] || exit 1
