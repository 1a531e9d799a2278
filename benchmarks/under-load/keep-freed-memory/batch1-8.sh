# run from the repository root
mkdir -p /tmp/ab /tmp/ab16 && source .venv/bin/activate
for i in 1 2 3; do for v in 1 0; do
  SPECVIZ_KEEP_FREED_MEMORY=$v python -m specviz bench --model embedded --device cpu --categories summarization,qa --limit 4 --max-new-tokens 64 --drafters vanilla,ngram_trie --peers '' --batch-sizes 1,8 --repeats 1 --warmup 1 --record bench --out /tmp/ab/$v-$i > /tmp/ab/$v-$i.log 2>&1
  python3 -c "
import json; d=json.load(open('/tmp/ab/$v-$i/results.json'))
print('keep=$v run $i', [(x['method'], x['batch_size'], round(x['tokens_per_s'],1), round(x['speedup'],2)) for x in d['rows'] if x['category']=='all'], d['meta']['runtime'].get('keep_freed_memory'))"
done; done
