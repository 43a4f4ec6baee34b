#!/bin/bash
# Writes what a build of hetsim prints for a fixed set of runs into OUT_DIR, so that a refactor
# can show its outputs unchanged: run it with the build before and after the change, then
# `diff -r BEFORE AFTER`. Wall times are left out; nothing else is.
#   scripts/same_outputs.sh BUILD_DIR OUT_DIR
# It runs (from the repository root): simulate --json on gpt3-13b over tests/data/study/
# tp4-pp2-dp2.yaml with fourteen --plan-set variants (schedules, ZeRO stages, recompute modes,
# frameworks, two under ZeRO-3 together); layered accumulation under ZeRO-3 on gpt3-1.3b; DT-FM's
# model on one p3.16xlarge; plan --json for each of the nine policies
# (--no-search) with each one's plan replayed, and two full searches; every `hetsim reference`
# page; the tables the e2e validation tests print; and `bench training`'s iterations and events.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
cd "$(dirname "$0")/.."
h=$build/hetsim
# Wall times, and the plan file's own path (it lies under OUT_DIR), are not outputs of the model.
keep() { grep -v -E '"wall|wall_s|elapsed|seconds_wall|"plan": "/' | sed -E 's/simulated in [0-9.]+ s//' || true; }

plan=tests/data/study/tp4-pp2-dp2.yaml
i=0
for set in "" schedule=interleaved schedule=gpipe zero_stage=1 zero_stage=2 zero_stage=3 \
  recompute=none recompute=selective recompute=full framework=deepspeed \
  framework=megatron-lm-2021 framework=pytorch-fsdp2 "schedule=interleaved zero_stage=3" \
  "framework=pytorch-fsdp2 zero_stage=3 recompute=full"; do
  i=$((i + 1))
  args=()
  for one in $set; do args+=(--plan-set "$one"); done
  "$h" simulate --model gpt3-13b --cluster dgx-a100 --nodes 2 --plan "$plan" "${args[@]}" --json \
    2>&1 | keep > "$out/simulate-$i.json"
done

cat > "$out/dtfm-plan.yaml" <<'PLAN'
tensor_parallel: 1
pipeline_parallel: 8
data_parallel: 1
micro_batch_size: 1
global_batch_size: 64
sequence_length: 2048
precision: fp16
recompute: none
attention: standard
sequence_parallel: false
optimizer: sgd
main_grads: same
framework: megatron-lm-2021
PLAN
"$h" simulate --model experiments/dtfm/gpt3-xl-dtfm.yaml --cluster aws-p3.16xlarge \
  --plan "$out/dtfm-plan.yaml" --json 2>&1 | keep > "$out/dtfm.json"

# Layered accumulation (Cephalo's) under ZeRO-3: each layer's gather issued a layer ahead.
cat > "$out/layered-plan.yaml" <<'PLAN'
data_parallel: 16
micro_batch_size: 2
global_batch_size: 128
sequence_length: 2048
gradient_accumulation: layered
zero_stage: 3
PLAN
"$h" simulate --model gpt3-1.3b --cluster dgx-a100 --nodes 2 --plan "$out/layered-plan.yaml" \
  --json 2>&1 | keep > "$out/layered.json"

for policy in megatron zero whale cannikin amp metis hetpipe flashflex cephalo; do
  "$h" plan --model gpt3-1.3b --cluster mixed-h100-a100 --global-batch-size 256 \
    --sequence-length 2048 --policy "$policy" --no-search --out "$out/plan-$policy.yaml" --json \
    --quiet 2>&1 | keep > "$out/plan-$policy.json"
  if [ -f "$out/plan-$policy.yaml" ]; then
    "$h" simulate --model gpt3-1.3b --cluster mixed-h100-a100 --plan "$out/plan-$policy.yaml" \
      --json 2>&1 | keep > "$out/replay-$policy.json"
  fi
done
"$h" plan --model gpt3-1.3b --cluster mixed-h100-a100 --global-batch-size 256 \
  --sequence-length 2048 --json --quiet 2>&1 | keep > "$out/plan-search.json"
"$h" plan --model gpt3-1.3b --cluster aws-p3-g4dn --global-batch-size 128 \
  --sequence-length 1024 --json --quiet 2>&1 | keep > "$out/plan-search-aws.json"

for page in plan-keys plan-schema cluster-keys cluster-schema model-keys framework-keys \
  study-keys gpu-keys link-class-keys commands; do
  "$h" reference "$page" > "$out/reference-$page.txt" 2>&1
done

"$build/tests/hetsim_e2e_tests" \
  --gtest_filter='*Validation*:Simulate.*:DefaultStudy.*:GroupedReport.*' 2>&1 |
  grep -v -E '^\[ +(OK|RUN|PASSED) |ms\)|ms total' |
  sed -E 's/(simulated|took|in) [0-9.]+ (s|ms)//g' > "$out/e2e.txt"

"$h" bench training --cases gpt3-175b,simai-moe,deepseek-v3 --quiet 2>&1 |
  awk '{print $1, $2, $5, $6, $7}' > "$out/bench.txt"
echo "same_outputs: wrote $(ls "$out" | wc -l) files to $out"
