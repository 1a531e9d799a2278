# run from the repository root
mkdir -p /tmp/ab /tmp/ab16 && source .venv/bin/activate
for i in 1 2; do for v in 1 0; do
  SPECVIZ_KEEP_FREED_MEMORY=$v python -m specviz bench --model embedded --device cpu --categories qa,summarization --limit 8 --max-new-tokens 64 --drafters vanilla,ngram_trie --peers '' --batch-sizes 16 --repeats 1 --warmup 1 --record bench --out /tmp/ab16/$v-$i > /tmp/ab16/$v-$i.log 2>&1
  python3 -c "
import json, statistics as st; d=json.load(open('/tmp/ab16/$v-$i/results.json'))
f={m: round(1000*st.mean(r['phase_seconds']['verify.forward']/r['steps'] for r in d['runs'] if r['method']==m)) for m in ('vanilla','ngram_trie')}
print('keep=$v run $i', [(x['method'], x['batch_size'], round(x['tokens_per_s'],1), round(x['speedup'],2), x['identical_to_vanilla']) for x in d['rows'] if x['category']=='all'], 'fwd ms/step', f, d['meta']['runtime'].get('keep_freed_memory'))"
done; done
