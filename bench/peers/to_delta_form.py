"""The shared harness's workload (uid<TAB>event JSON lines, as side-by-side.sh writes them for kcat) in the packed
delta form `trajflow gateway` and `trajflow.emit` write: a continued call's prompt as parent_call_id +
prompt_delta_ids, token ids and logprobs as {"b64": ...}. BENCHMARKS.md, "Memory and CPU, round three".
usage: to_delta_form.py <in.tsv> <out.tsv>; then kcat -P -b <broker> -t <topic> -K $'\\t' -z zstd -X linger.ms=50 < out.tsv
"""
import sys, base64, orjson, numpy as np
src, dst = sys.argv[1], sys.argv[2]
prev = {}  # session -> (call_id, prompt, output)
pk = lambda a, dt: {"b64": base64.b64encode(np.asarray(a, dtype=dt).tobytes()).decode()}
with open(src, 'rb') as f, open(dst, 'wb') as out:
    for line in f:
        key, js = line.rstrip(b'\n').split(b'\t', 1)
        e = orjson.loads(js); sid = e['session_id']
        if e['type'] == 'request':
            p = e['prompt_ids']; last = prev.get(sid)
            if last is not None and p[:len(last[1]) + len(last[2])] == last[1] + last[2]:
                e['parent_call_id'] = last[0]; e['prompt_delta_ids'] = pk(p[len(last[1]) + len(last[2]):], '<i4'); del e['prompt_ids']
            else:
                e['prompt_ids'] = pk(p, '<i4')
            prev[sid] = (e['call_id'], p, None)
        elif e['type'] == 'response':
            c, p, _ = prev[sid]; prev[sid] = (c, p, e['output_ids'])
            e['output_ids'] = pk(e['output_ids'], '<i4'); e['logprobs'] = pk(e['logprobs'], '<f4')
        elif e['type'] == 'session.end':
            prev.pop(sid, None)
        out.write(key + b'\t' + orjson.dumps(e) + b'\n')
