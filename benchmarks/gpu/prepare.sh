#!/usr/bin/env bash
# Here (no GPU): pack what a lent GPU machine needs into .gpu/ (git-ignored), in pieces that
# each fit one device call beside the working tree (64 MiB a call in all). See README.md.
#   bash benchmarks/gpu/prepare.sh            # .gpu/c1 .. .gpu/cN
set -euo pipefail
cd "$(dirname "$0")/../.."
PIECE_MB=${PIECE_MB:-32}            # a call carries one piece; the working tree (~25 MB) travels too
rm -rf .gpu && mkdir -p .gpu/whl .gpu/split
# the device's python3 is 3.12 with torch, transformers 5.17, numpy, tokenizers, sentence-transformers
# (device README, KINDS.md); what specviz needs beyond that, at requirements.txt's pins:
for p in gguf==0.19.0 plotly==7.1.0 transformers==5.23.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/whl "$p" 2>&1 | grep -v '^WARNING: Location' || true
done
gguf=$(.venv/bin/python -c "from specviz import embedded; print(embedded.gguf_dir() / embedded.GGUF)")
split -b "${PIECE_MB}M" -d "$gguf" .gpu/split/gguf.part-
sha256sum "$gguf" | cut -d' ' -f1 > .gpu/split/gguf.sha256
# one piece a call: .gpu/c1 the wheels, then a part of the model each
mkdir -p .gpu/c1 && mv .gpu/whl .gpu/c1/
i=1
for part in .gpu/split/gguf.part-*; do i=$((i + 1)); mkdir -p .gpu/c$i; mv "$part" .gpu/c$i/; done
mv .gpu/split/gguf.sha256 .gpu/c$i/ && rmdir .gpu/split
du -sh .gpu/c*
echo "calls: $(ls -d .gpu/c* | wc -l); carry .gpu/cK in call K, command: bash benchmarks/gpu/device.sh receive"
