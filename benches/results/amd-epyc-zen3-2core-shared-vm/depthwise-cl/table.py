import json,collections
best=collections.defaultdict(dict)
for l in open('gemm_ab_runs.jsonl'):
    d=json.loads(l); r=d['r']; k=(tuple(r['input']),r['k'],r['stride'],r['pad'])
    b=d['bin']; best[k][b]=max(best[k].get(b,0), r['gflops'])
print('| depthwise layer (C×H×W, kernel, stride) | output | before GFLOP/s (the path of main: planes; 7×7 outputs the old channels-innermost kernel) | after GFLOP/s (8-channel blocks) | speedup |')
print('|---|---|---:|---:|---:|')
for k,v in best.items():
    (c,h,w),kk,s,p=k; oh=(h+2*p-kk)//s+1
    print(f"| {c}×{h}×{w}, {kk}×{kk}, s{s} | {oh}×{oh} | {v['gab_old']:.1f} | {v['gab_b8f']:.1f} | {v['gab_b8f']/v['gab_old']:.2f}× |")
