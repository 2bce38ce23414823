#!/usr/bin/env bash
# End-to-end checks of the tessera CLI: exit codes, --json, --output-dir,
# error lines. Usage: cli_test.sh BUILD_DIR (needs BUILD_DIR/zoo).
set -uo pipefail
BUILD=${1:?build dir}
T=$BUILD/bin/tessera
ZOO=$BUILD/zoo
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
check() {  # check NAME COMMAND...: passes when COMMAND succeeds
  local name=$1
  shift
  if "$@" >"$TMP/log" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name"
    sed 's/^/    /' "$TMP/log" | head -20
  fi
}
# expect_fail NAME EXPECTED_RC NEEDLE COMMAND...: COMMAND exits with rc and
# prints exactly one line on stderr, containing NEEDLE
expect_fail() {
  local name=$1 rc=$2 needle=$3
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  if [[ $got -eq $rc ]] && grep -qF -- "$needle" "$TMP/err" && [[ $(wc -l <"$TMP/err") -eq 1 ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name (rc $got, want $rc; want '$needle' in stderr)"
    sed 's/^/    /' "$TMP/err" | head -5
  fi
}

# The suite's caches: the build tree's (ctest sets it, CMakeLists.txt), never
# the user's.
export TESSERA_CACHE=${TESSERA_CACHE:-$BUILD/test-cache}

check "version" bash -c "$T --version | grep -qx 'tessera [0-9.]*'"
# The plan choice is cached only when the host held still while it was
# timed (plan_choice_test pins that with a fake runner); otherwise the run
# says so. Either way nothing goes under HOME.
check "a run caches its map and plan choice under \$TESSERA_CACHE, nothing under HOME" bash -c \
  "HOME=$TMP/home $T run $ZOO/mlp.onnx --iters 1 --quiet 2>$TMP/cache_err && test ! -e $TMP/home && ls $TESSERA_CACHE/hostmap-*.json && { ls $TESSERA_CACHE/plans-*.tsv || grep -q 'is not cached, the next compile measures again' $TMP/cache_err; }"
check "version: kernels' instruction set" bash -c "$T --version | grep -qxE 'cpu kernels: (avx512|avx2|portable)'"
check "help lists commands" bash -c "$T --help | grep -q 'run MODEL.onnx' && $T --help | grep -q inspect"
check "run --help documents options" bash -c "$T run --help | grep -q -- '--output-dir DIR' && $T run --help | grep -q -- '--executor NAME'"
check "ops lists Conv" bash -c "$T ops | grep -q '^Conv ' && $T ops | grep -q '^LSTM '"
check "inspect resnet18" bash -c "$T inspect $ZOO/resnet18.onnx > $TMP/insp && grep -q 'Conv  *20' $TMP/insp && grep -q '^flops .*G per run' $TMP/insp && grep -q '^params .*11.[0-9]*M' $TMP/insp"

# --json: one object on stdout with the documented fields.
check "run --json" bash -c "$T run $ZOO/mlp.onnx --input $ZOO/mlp.inputs.npz --iters 3 --json 2>/dev/null > $TMP/j.json && $PY -c '
import json,sys
j=json.load(open(\"$TMP/j.json\"))
assert j[\"model\"].endswith(\"mlp.onnx\"), j
assert j[\"executor\"]==\"plan\" and j[\"iters\"]==3 and j[\"threads\"]>=1
l=j[\"latency_ms\"]; assert 0<l[\"min\"]<=l[\"median\"]<=l[\"p90\"]<=l[\"max\"], l
assert j[\"outputs\"]==[{\"name\":\"output\",\"dtype\":\"float32\",\"shape\":[16,10]}], j[\"outputs\"]
'"

# --output-dir: outputs equal PyTorch's.
for ex in plan sequential two-layer; do
  check "output-dir matches PyTorch ($ex)" bash -c "$T run $ZOO/bert_tiny.onnx --input $ZOO/bert_tiny.inputs.npz --executor $ex --iters 1 --output-dir $TMP/o_$ex --quiet && $PY -c '
import numpy as np
ref=np.load(\"$ZOO/bert_tiny.outputs.npz\")
for k in ref.files:
    a=np.load(\"$TMP/o_$ex/\"+k+\".npy\"); r=ref[k]
    e=np.linalg.norm(a-r)/np.linalg.norm(r)
    assert e<1e-4, (k,e)
'"
done

# Inputs given one by one with NAME=FILE.npy; the rest random (and said so).
check "NAME=FILE.npy input" bash -c "$PY -c '
import numpy as np
d=np.load(\"$ZOO/mlp.inputs.npz\"); np.save(\"$TMP/x.npy\", d[\"input\"])' && $T run $ZOO/mlp.onnx --input input=$TMP/x.npy --iters 1 --output-dir $TMP/o2 --quiet && $PY -c '
import numpy as np
a=np.load(\"$TMP/o2/output.npy\"); r=np.load(\"$ZOO/mlp.outputs.npz\")[\"output\"]
assert np.linalg.norm(a-r)/np.linalg.norm(r)<1e-4'"
check "random inputs are announced" bash -c "$T run $ZOO/mlp.onnx --iters 1 2>&1 | grep -q \"input 'input': random float32 16x784 (seed 0)\""

# Output names are sanitized into file names.
check "odd output names" bash -c "$PY -c '
import onnx
from onnx import helper, TensorProto
n=helper.make_node(\"Relu\",[\"x\"],[\"a/b:c d\"])
g=helper.make_graph([n],\"g\",[helper.make_tensor_value_info(\"x\",TensorProto.FLOAT,[2])],[helper.make_tensor_value_info(\"a/b:c d\",TensorProto.FLOAT,[2])])
onnx.save(helper.make_model(g,opset_imports=[helper.make_opsetid(\"\",17)]),\"$TMP/odd.onnx\")' && $T run $TMP/odd.onnx --iters 1 --output-dir $TMP/o3 --quiet && test -f '$TMP/o3/a_b_c_d.npy'"

# The Plan: summary, instruction lists, Gantt chart, trace, breakdown. (The
# profile check pins one host map: the profile cache is keyed by what the
# map says the PUs share, which this host may change between two commands.)
check "plan summary and svg" bash -c "$T plan $ZOO/nasnet_like.onnx --veus 2 --no-measure --svg $TMP/p.svg > $TMP/plan.txt && grep -q '^vEUs       2' $TMP/plan.txt && grep -q '^waits ' $TMP/plan.txt && grep -q '<svg' $TMP/p.svg && test \$(grep -c '<rect' $TMP/p.svg) -ge \$(sed -n 's/^ops .*rTasks \\([0-9]*\\)\$/\\1/p' $TMP/plan.txt)"
check "plan --list" bash -c "$T plan $ZOO/add_chains8.onnx --veus 2 --policy wavefront --list | grep -q '^  wait   vEU'"
check "run --trace" bash -c "$T run $ZOO/mlp.onnx --iters 1 --threads 2 --trace $TMP/t.json --quiet && $PY -c '
import json
ev=json.load(open(\"$TMP/t.json\"))[\"traceEvents\"]
x=[e for e in ev if e[\"ph\"]==\"X\"]
m=[e for e in x if e[\"pid\"]==1]; p=[e for e in x if e[\"pid\"]==2]
assert len(m)==len(p)>0, (len(m),len(p))
assert all(e[\"dur\"]>=0 and \"task\" in e[\"args\"] for e in x)
assert {e[\"tid\"] for e in m} <= {0,1}
'"
# Channel blocks: where the build has the blocked rKernels, MobileNetV2's
# 51 1x1 and depthwise convs run on them by default (the run line says so,
# and the trace names their path, a depthwise conv's padded where that
# measured faster); --no-channel-blocks keeps them on NCHW planes.
if $T --version | grep -qE 'cpu kernels: avx(2|512)'; then
  check "channel blocks by default" bash -c "$T run $ZOO/mobilenet_v2.onnx --iters 1 --no-measure --trace $TMP/tb.json 2>&1 | grep -q '51 convs on channel blocks' && $PY -c '
import json
x=[e for e in json.load(open(\"$TMP/tb.json\"))[\"traceEvents\"] if e[\"ph\"]==\"X\"]
b=[e for e in x if e[\"name\"]==\"TesseraBlockedConv\"]
paths={e[\"args\"][\"path\"] for e in b}
dw={\"blocked depthwise\", \"blocked depthwise padded\"}  # the padded rKernel where it measured faster
assert b and \"blocked 1x1\" in paths and paths & dw and paths <= dw | {\"blocked 1x1\"}, paths
assert [e[\"name\"] for e in x].count(\"TesseraToBlocked\") >= 1
'"
  check "no-channel-blocks" bash -c "! $T run $ZOO/mobilenet_v2.onnx --iters 1 --no-measure --no-channel-blocks 2>&1 | grep -q 'channel blocks'"
fi
# tessera profile: one row per op with the algorithm each Conv chose
# (depthwise, 1x1), --top, the cache on a second call, and a trace's Conv
# slices naming their path (conv.depthwise's a depthwise one). Which
# rKernel a depthwise op gets is measured: under ASan, where DwDirect's
# checks are calls, some take im2col + sgemm.
check "profile table and paths" bash -c "export TESSERA_CACHE=$TMP/pcache; $T topo --json --quiet > $TMP/pmap.json && $PY -c 'import json; j=json.load(open(\"$TMP/pmap.json\")); j[\"llc_kb\"]=32768; j[\"llc_held_kb\"]=16384; json.dump(j, open(\"$TMP/pmap.json\", \"w\"))' && export TESSERA_HOST_MAP=$TMP/pmap.json && $T profile $ZOO/nasnet_like.onnx > $TMP/prof.txt && head -1 $TMP/prof.txt | grep -q ' path ' && grep -q 's5a/dw/Conv .* depthwise ' $TMP/prof.txt && grep -q 'proj/Conv .* 1x1 ' $TMP/prof.txt && $T profile $ZOO/nasnet_like.onnx --top 3 > $TMP/prof2.txt && test \$(grep -c '(cached)\$' $TMP/prof2.txt) -eq 3 && grep -q '; 0 measured, 95 from the cache' $TMP/prof2.txt"
check "profile: weights beyond the last-level cache timed cold" bash -c "export TESSERA_CACHE=$TMP/pcache; $PY -c 'import json; j=json.load(open(\"$TMP/pmap.json\")); j[\"llc_kb\"]=64; json.dump(j, open(\"$TMP/pmap_small.json\", \"w\"))' && grep -q 'each rTask timed with its weights in cache' $TMP/prof.txt && $T profile $ZOO/nasnet_like.onnx --host-map $TMP/pmap_small.json --top 1 > $TMP/prof3.txt && grep -q 'last-level cache 0.1 MiB: more than it holds, so each rTask was timed with its weights evicted first' $TMP/prof3.txt"
check "trace slices name the path" bash -c "export TESSERA_CACHE=$TMP/pcache; $T run $ZOO/nasnet_like.onnx --iters 1 --threads 2 --trace $TMP/tn.json --quiet && $PY -c '
import json
x=[e for e in json.load(open(\"$TMP/tn.json\"))[\"traceEvents\"] if e[\"ph\"]==\"X\"]
conv=[e for e in x if e[\"name\"]==\"Conv\"]
assert conv and all(e[\"args\"][\"path\"] for e in conv), conv[:2]
dw=[e for e in conv if e[\"args\"][\"rKernel\"]==\"conv.depthwise\"]
assert all(e[\"args\"][\"path\"].startswith(\"depthwise\") for e in dw), dw[:2]
assert all(\"path\" not in e[\"args\"] for e in x if e[\"name\"]==\"Relu\")
'"
check "json breakdown per run" bash -c "$T run $ZOO/mlp.onnx --iters 4 --threads 2 --no-measure --json 2>/dev/null | $PY -c '
import json,sys
j=json.load(sys.stdin); r=j[\"runs\"]
assert len(r)==4 and all(len(x[\"wait_ms\"])==2 and x[\"wall_ms\"]>=x[\"compute_ms\"]>0 and x[\"copy_in_ms\"]>=0 and x[\"device_ms\"]==0 for x in r), r
assert all(isinstance(x[\"alone\"], bool) and isinstance(x[\"exchanged\"], bool) and not (x[\"alone\"] and x[\"exchanged\"]) for x in r), r
assert all(isinstance(x[\"taken\"], int) and x[\"taken\"] >= 0 and not (x[\"alone\"] and x[\"taken\"]) for x in r), r
assert j[\"plan\"][\"veus\"]==2 and j[\"plan\"][\"policy\"] in (\"wavefront\",\"critical-path\")
'"
# --no-measure: a choice timed while the host held a vEU back may start
# alone, and --no-adapt then runs it alone (run_mode_test covers that).
check "no-adapt keeps every run on the Plan" bash -c "$T run $ZOO/mlp.onnx --iters 6 --threads 2 --no-measure --no-adapt --json 2>/dev/null | $PY -c '
import json,sys
r=json.load(sys.stdin)[\"runs\"]
assert len(r)==6 and all(x[\"alone\"] is False and x[\"exchanged\"] is False and x[\"taken\"]==0 for x in r), r
'"
check "no-adapt says nothing adapted" bash -c "out=\$($T run $ZOO/mlp.onnx --iters 6 --threads 2 --no-measure --no-adapt 2>&1) && ! grep -q 'adapted to the host' <<<\"\$out\" && grep -q 'latency over 6 runs' <<<\"\$out\""
expect_fail "no-adapt needs plan" 2 "--no-adapt applies to the plan executor only" $T run $ZOO/mlp.onnx --executor sequential --no-adapt
expect_fail "trace needs plan" 2 "--trace needs the plan executor" $T run $ZOO/mlp.onnx --executor sequential --trace $TMP/x.json
expect_fail "bad policy" 2 "--policy must be" $T run $ZOO/mlp.onnx --policy fastest
expect_fail "bad recurrent chunk" 2 "--recurrent-chunk must be between 0" $T run $ZOO/mlp.onnx --recurrent-chunk -1
expect_fail "chunk without lowering" 2 "needs the recurrent lowering" $T run $ZOO/mlp.onnx --recurrent-chunk 4 --no-lower-recurrent

# tessera compile -> MODEL.tsx; tessera run MODEL.tsx gives the outputs
# tessera run MODEL.onnx gives, without the ONNX file.
# --no-measure: the Plan stays on the 2 vEUs asked for, whatever a timed
# choice would find on this host (the checks below count them).
check "compile writes an Executable" bash -c "$T compile $ZOO/bert_tiny.onnx --shape input_ids=1x64 --shape attention_mask=1x64 -o $TMP/bert.tsx --veus 2 --no-measure --quiet && test -s $TMP/bert.tsx"
check "compile --help" bash -c "$T compile --help | grep -q -- '-o, --output FILE'"
check "run MODEL.tsx equals run MODEL.onnx" bash -c "cp $TMP/bert.tsx $TMP/moved.tsx && \
  $T run $TMP/moved.tsx --input $ZOO/bert_tiny.inputs.npz --iters 1 --output-dir $TMP/o_tsx --quiet && \
  $T run $ZOO/bert_tiny.onnx --input $ZOO/bert_tiny.inputs.npz --iters 1 --output-dir $TMP/o_onnx --quiet && \
  for f in $TMP/o_onnx/*.npy; do cmp \$f $TMP/o_tsx/\$(basename \$f) || exit 1; done && ls $TMP/o_tsx/*.npy >/dev/null"
check "run MODEL.tsx --json names the plan" bash -c "$T run $TMP/bert.tsx --iters 2 --json --quiet | $PY -c '
import json,sys; j=json.loads(sys.stdin.read()); assert j[\"plan\"][\"veus\"]==2, j'"
check "inspect MODEL.tsx counts FLOPs and shows the plan" bash -c "$T inspect $TMP/bert.tsx > $TMP/insp_tsx && \
  grep -q '^flops .*M per run' $TMP/insp_tsx && grep -q '^plan  *2 vEUs' $TMP/insp_tsx && \
  ! grep -q unknown $TMP/insp_tsx"
expect_fail "tsx: compile needs -o" 2 "-o FILE" $T compile $ZOO/mlp.onnx
expect_fail "tsx: other executor" 2 "runs on the plan executor only" $T run $TMP/bert.tsx --executor sequential
expect_fail "tsx: vEU count fixed" 2 "compiled for 2 vEUs" $T run $TMP/bert.tsx --threads 3
expect_fail "tsx: shapes fixed" 2 "applies when compiling" $T run $TMP/bert.tsx --shape input_ids=1x8
expect_fail "tsx: lowering fixed" 2 "--no-lower-recurrent applies when compiling" $T run $TMP/bert.tsx --no-lower-recurrent
expect_fail "tsx: truncated" 1 "truncated" bash -c "head -c 5000 $TMP/bert.tsx > $TMP/cut.tsx; $T run $TMP/cut.tsx"
expect_fail "tsx: bad version" 1 "format version 99" bash -c "cp $TMP/bert.tsx $TMP/v.tsx; printf '\\x63' | dd of=$TMP/v.tsx bs=1 seek=8 conv=notrunc status=none; $T run $TMP/v.tsx"

# Errors: non-zero exit and one clear line.
expect_fail "missing model" 1 "does not exist" $T run $TMP/none.onnx
expect_fail "not a model" 1 "not an ONNX model" bash -c "echo hello > $TMP/bad.onnx; $T run $TMP/bad.onnx"
expect_fail "unknown option" 2 "unknown option '--itters'" $T run $ZOO/mlp.onnx --itters 3
expect_fail "bad --iters" 2 "--iters expects an integer" $T run $ZOO/mlp.onnx --iters many
expect_fail "bad --executor" 2 "--executor must be" $T run $ZOO/mlp.onnx --executor fast
expect_fail "unknown command" 2 "unknown command 'runn'" $T runn
# ONNX's checks run in tessera-onnx-check: a crash there, or a helper that
# cannot start, is one error line, never a crash of tessera itself.
printf '#!/bin/sh\nkill -SEGV $$\n' >"$TMP/crashing-check" && chmod +x "$TMP/crashing-check"
expect_fail "checker crash contained" 1 "crashed on this model (signal 11)" \
  env TESSERA_ONNX_CHECK="$TMP/crashing-check" $T run $ZOO/mlp.onnx
expect_fail "checker missing" 1 "cannot start $TMP/no-such-check" \
  env TESSERA_ONNX_CHECK="$TMP/no-such-check" $T run $ZOO/mlp.onnx
check "checker helper help" bash -c "$BUILD/bin/tessera-onnx-check --help | grep -q 'exit 0 passed'"
expect_fail "dynamic dims" 1 "e.g. input_ids=1x1" $T run $ZOO/bert_tiny.onnx
expect_fail "wrong input name" 1 "not a model input" bash -c "$T run $ZOO/mlp.onnx --input nosuch=$TMP/x.npy"
expect_fail "wrong input shape" 1 "has shape" bash -c "$PY -c 'import numpy as np; np.save(\"$TMP/s.npy\", np.zeros((2,3),np.float32))' && $T run $ZOO/mlp.onnx --input input=$TMP/s.npy"
check "--shape binds dynamic dims" $T run $ZOO/bert_tiny.onnx --shape input_ids=1x16 --shape attention_mask=1x16 --iters 1 --quiet

# The host map: --json has the documented fields; a given map is shown as
# given; a malformed one is one error line naming the field.
check "topo --json" bash -c "$T topo --json --quiet > $TMP/topo.json && $PY -c '
import json
j=json.load(open(\"$TMP/topo.json\"))
n=len(j[\"pus\"]); assert n>=1, j
assert len(j[\"read_cost\"])==n and all(len(r)==n and all(x>0 for x in r) for r in j[\"read_cost\"]), j[\"read_cost\"]
assert j[\"version\"]==1 and j[\"origin\"] in (\"measured\",\"cache\") and j[\"conclusions\"], j
assert all(j[\"sharing\"][i][i]==\"self\" for i in range(n))
'"
printf '{"version": 1, "pus": [{"os_index": 0}, {"os_index": 1}], "read_cost": [[10, 50], [50, 10]], "handoff_ns": [[0, 300], [300, 0]]}' >"$TMP/map.json"
check "topo --host-map" bash -c "$T topo --host-map $TMP/map.json > $TMP/topo.txt && grep -q 'from      file $TMP/map.json' $TMP/topo.txt && grep -q 'crossing costs +40.0 ns/KB' $TMP/topo.txt"
check "topo reads TESSERA_HOST_MAP" bash -c "TESSERA_HOST_MAP=$TMP/map.json $T topo --json | $PY -c 'import json,sys; j=json.load(sys.stdin); assert j[\"read_cost\"]==[[10,50],[50,10]], j'"
expect_fail "topo: bad map" 1 "read_cost[1][0]: expected a number" bash -c "printf '{\"version\": 1, \"pus\": [{}, {}], \"read_cost\": [[1, 2], [null, 1]]}' > $TMP/bad.json; $T topo --host-map $TMP/bad.json"
expect_fail "topo: missing map" 1 "cannot read host map" $T topo --host-map $TMP/nothing.json
expect_fail "topo: refresh and a file" 2 "--refresh measures this host" $T topo --refresh --host-map $TMP/map.json

# The Plan's choice: --json says how it was chosen; the 1-vEU Plan is
# always a candidate; medians within 2 % are a tie that goes to fewer
# vEUs (a wider Plan that starts alone, its rTasks timed on one thread
# against the 1-vEU Plan, may stand instead); --no-measure keeps the predicted choice; a given host map is
# planned for.
check "run --json: measured plan choice" bash -c "$T run $ZOO/mlp.onnx --iters 3 --threads 2 --json 2>/dev/null > $TMP/m.json && $PY -c '
import json
p=json.load(open(\"$TMP/m.json\"))[\"plan\"]
assert p[\"chosen_by\"]==\"measured\" and p[\"requested_veus\"]==2 and 1<=p[\"veus\"]<=2, p
assert any(c[\"veus\"]==1 for c in p[\"candidates\"]) and any(c[\"veus\"]==2 for c in p[\"candidates\"]), p
best=min(c[\"measured_ms\"] for c in p[\"candidates\"]); tied=[c for c in p[\"candidates\"] if c[\"measured_ms\"]<=1.02*best+1e-6]
assert p[\"measured_ms\"]<=1.02*best+1e-6, p
assert p[\"alone_first\"] or p[\"veus\"]==min(c[\"veus\"] for c in tied), p
assert len(p[\"per_veu\"])==p[\"veus\"] and all(v[\"predicted_end_ms\"]>0 for v in p[\"per_veu\"]), p
'"
check "run --no-measure: predicted choice" bash -c "$T run $ZOO/mlp.onnx --iters 3 --threads 2 --no-measure --json 2>/dev/null | $PY -c '
import json,sys
p=json.load(sys.stdin)[\"plan\"]; assert p[\"chosen_by\"]==\"predicted\" and p[\"veus\"]==2 and p[\"candidates\"]==[], p
'"
check "compile --host-map records the choice" bash -c "$T compile $ZOO/mlp.onnx --veus 2 --host-map $TMP/map.json -o $TMP/mlp.tsx --quiet && $T plan $TMP/mlp.tsx | grep -q '^chosen     by timing'"
expect_fail "run: host map for a tsx" 2 "--host-map applies when compiling" $T run $TMP/mlp.tsx --host-map $TMP/map.json

# Devices: the cpu by core and the null device; every zoo model runs on
# the null device, with its outputs zero-filled and its inputs still checked.
check "devices" bash -c "$T devices | grep -qE '^cpu +cpu +[0-9]+' && $T devices | grep -qE '^null +null'"
check "devices --json" bash -c "$T devices --json | $PY -c '
import json,sys
d={x[\"name\"]: x for x in json.load(sys.stdin)[\"devices\"]}
assert d[\"cpu\"][\"veus\"]>=1 and d[\"cpu\"][\"memory_bytes\"]>0 and d[\"null\"][\"kind\"]==\"null\", d
'"
for m in "$ZOO"/*.onnx; do
  n=$(basename "$m" .onnx)
  check "run --device null: $n" bash -c "rm -rf $TMP/null && $T run $m --input $ZOO/$n.inputs.npz --device null --iters 2 \
    --output-dir $TMP/null --json 2>/dev/null | $PY -c '
import glob,json,sys
import numpy as np
j=json.load(sys.stdin); assert j[\"device\"]==\"null\", j
files=glob.glob(\"$TMP/null/*.npy\"); assert files
assert all(not np.load(f).any() for f in files), files
'"
done
expect_fail "run --device null: inputs checked" 1 "has shape" bash -c "$PY -c 'import numpy as np; np.save(\"$TMP/bad.npy\", np.zeros((2, 2), np.float32))' && $T run $ZOO/mlp.onnx --input input=$TMP/bad.npy --device null"
expect_fail "run --device: unknown" 2 "no device 'tpu'" $T run $ZOO/mlp.onnx --device tpu

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
