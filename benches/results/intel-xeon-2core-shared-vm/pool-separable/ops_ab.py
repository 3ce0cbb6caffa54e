import json, sys
def load(b):
    d = json.load(open(f'{b}/ops.json'))
    return {(r['case'], str(r['shape']), r['level']): r for r in d['cases']}, d['families']
a, fa = load(sys.argv[1]); b, fb = load(sys.argv[2])
for k in a:
    if len(sys.argv) > 3 and sys.argv[3] not in k[0]: continue
    print(f"{k[0]:22s} {k[1]:16s} {k[2]:5s} {a[k]['us']:9.2f} -> {b[k]['us']:9.2f} us ({a[k]['us']/b[k]['us']:5.2f}x)  eff {a[k]['efficiency']*100:4.0f}% -> {b[k]['efficiency']*100:4.0f}%")
print(fa, fb)
