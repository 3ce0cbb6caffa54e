import sys, statistics as st, collections
u={'ns':1e-3,'µs':1.0,'ms':1e3,'s':1e6}
d=collections.defaultdict(lambda: {'old':[], 'new':[]})
order=[]
for line in open(sys.argv[1]):
    p=line.split()
    if len(p)!=5: continue
    w,r,name,v,unit=p
    if name not in order: order.append(name)
    d[name][w].append(float(v)*u[unit])
print("| bench | old µs (median) | new µs (median) | new/old | old rounds | new rounds |")
print("|---|---:|---:|---:|---|---|")
for n in order:
    o,nn=d[n]['old'],d[n]['new']
    if not o or not nn: continue
    mo,mn=st.median(o),st.median(nn)
    f=lambda xs:' '.join(f'{x:.4g}' for x in xs)
    print(f"| {n.removeprefix('dense/')} | {mo:.4g} | {mn:.4g} | {mn/mo:.3f} | {f(o)} | {f(nn)} |")
