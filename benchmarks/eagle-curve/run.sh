#!/usr/bin/env bash
# The long CPU run (see /work/runs/PLAN.md). Re-running this script continues where it stopped:
# distill resumes from the ids its .jsonl holds (skipped once distill.done exists), train-eagle
# resumes from run.json. It runs the code snapshot in $L/$SRC (git archive of a branch at the commit
# in $L/$SRC/COMMIT), so later edits to the worktree never change a running job. src/: branch train
# (2eeae2b, EAGLE + EAGLE-3, steps 1-~190, run-1.sh); src-2/: branch mtptrain (MTP joins as a third kind).
set -u
L=/work/runs/long
SRC=${SRC:-src-2}
cd $L/$SRC
export PATH=/work/main/.venv/bin:$PATH OMP_WAIT_POLICY=passive PYTHONUNBUFFERED=1
GEN_MINUTES=${GEN_MINUTES:-60}          # phase A's wall-clock budget (self-distillation)
STEPS=${STEPS:-1200}                    # phase B's schedule length (optimiser steps of 2 x 512 tokens); PLAN.md's arithmetic
KINDS=${KINDS:-eagle,eagle3,mtp}        # the heads; mtp joined at the step reached on 2026-11-28 (its own counters)
MTP_STEPS=${MTP_STEPS:-400}             # MTP's own steps (its cosine over them), fewer than the run's: PLAN.md
MTP_UNROLL=${MTP_UNROLL:-1}             # 1: DeepSeek-V3's objective (the cost of 2-3 measured in PLAN.md)
VOCAB=${VOCAB:-0}                       # 0: sized by --coverage
COVERAGE=${COVERAGE:-0.95}              # CPU: the heads' cost grows with the vocabulary (PLAN.md)
echo "== $(date -Is) start (commit $(cat COMMIT))"
if [ ! -e $L/distill.done ]; then
  # A1: the fixed held-out split's conversations (48), answered by the target
  python -m specviz distill --out $L/distill.jsonl --split held-out --max-conversations 48 --batch 16 \
    --max-new-tokens 256 --max-turns 1 --dtype bfloat16 --threads 2
  # A2: the training split, for GEN_MINUTES of wall clock (SIGINT: the batch in flight is dropped, the file stays whole)
  timeout -s INT ${GEN_MINUTES}m python -m specviz distill --out $L/distill.jsonl --split train --batch 16 \
    --max-new-tokens 256 --max-turns 1 --dtype bfloat16 --threads 2
  touch $L/distill.done
  echo "== $(date -Is) distilled: $(wc -l < $L/distill.jsonl) conversations"
fi
RESUME=""; [ -e $L/run/run.json ] && RESUME="--resume"
python -m specviz train-eagle --kind $KINDS --model embedded \
  --data $L/distill.jsonl,sharegpt --data-weights 1,1 --held-out 16 \
  --seq-len 512 --batch 2 --steps $STEPS --warmup 30 --lr 5e-4 --ttt 7 --positions 7 \
  --vocab $VOCAB --coverage $COVERAGE --eval-every 100 --save-every 50 --save-minutes 15 \
  --target-dtype bfloat16 --threads 2 --out $L/run $RESUME \
  --mtp-unroll $MTP_UNROLL --mtp-steps $MTP_STEPS --mtp-positions 3
echo "== $(date -Is) train-eagle exit $?"
