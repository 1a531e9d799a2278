# Paired check of models/grouped_attention.py: the same commit with SPECVIZ_GROUPED_ATTENTION=1 (sdpa_grouped)
# and =0 (transformers' sdpa, repeat_kv), alternating; one request at a time, then 4 at a time.
# Run from the repository root on a quiet machine; prints one line per run (ab.txt holds what it printed).
OUT=${OUT:-/tmp/gqa-ab}; mkdir -p $OUT && source .venv/bin/activate
report() {  # $1 folder, $2 label
  python3 -c "
import json, statistics as st; d=json.load(open('$1/results.json'))
ms=sorted({r['method'] for r in d['runs']})
f={m: round(1000*st.mean(r['phase_seconds']['verify.forward']/r['steps'] for r in d['runs'] if r['method']==m), 1) for m in ms}
print('$2', d['meta']['runtime'].get('attention'), [(x['method'], x['batch_size'], round(x['tokens_per_s'],1), round(x['speedup'],2), x['identical_to_vanilla']) for x in d['rows'] if x['category']=='all'], 'forward ms/step', f, flush=True)"
}
for i in 1 2; do for v in 1 0; do
  SPECVIZ_GROUPED_ATTENTION=$v python -m specviz bench --model embedded --device cpu \
    --categories summarization,rag,qa,translation,math_reasoning,writing,roleplay --limit 1 --max-new-tokens 64 \
    --drafters vanilla,prompt_lookup,ngram_trie,suffix_decoding,eagle3 --peers '' --repeats 1 --warmup 1 \
    --record bench --out $OUT/b1-$v-$i > $OUT/b1-$v-$i.log 2>&1
  report $OUT/b1-$v-$i "one request, grouped=$v run $i"
done; done
for v in 1 0; do
  SPECVIZ_GROUPED_ATTENTION=$v python -m specviz bench --model embedded --device cpu --categories qa,summarization \
    --limit 4 --max-new-tokens 64 --drafters vanilla,ngram_trie,eagle3 --peers '' --batch-sizes 4 --repeats 1 \
    --warmup 1 --record bench --out $OUT/b4-$v > $OUT/b4-$v.log 2>&1
  report $OUT/b4-$v "4 requests, grouped=$v"
done
