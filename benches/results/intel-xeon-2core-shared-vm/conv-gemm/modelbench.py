import sys, json, subprocess, time, os
import numpy as np, onnxruntime as ort
clis = sys.argv[1].split(","); models = sys.argv[2].split(","); rounds = int(sys.argv[3]); samples = int(sys.argv[4]) if len(sys.argv) > 4 else 10
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL; so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
def kbench(cli, kes):
    r = subprocess.run([cli, "bench", kes, "--samples", str(samples), "--reps", "1", "--threads", "1", "--batch", "1", "--json"], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["us_per_sample"]
for m in models:
    on = f"/tmp/families-speed/{m}.onnx"
    kes = {}
    for i, c in enumerate(clis):
        kes[c] = f"/tmp/h2/{m}.{os.path.basename(c)}.kes"
        if not os.path.exists(kes[c]):
            subprocess.run([c, "convert", on, "-o", kes[c]], check=True, capture_output=True)
    sess = ort.InferenceSession(on, so, providers=["CPUExecutionProvider"])
    i0 = sess.get_inputs()[0]
    feed = {i0.name: np.random.default_rng(0).random([d if isinstance(d, int) else 1 for d in i0.shape], dtype=np.float32)}
    sess.run(None, feed)
    res = {c: [] for c in clis}; ores = []
    for r in range(rounds):
        order = clis[r % len(clis):] + clis[:r % len(clis)]
        for c in order: res[c].append(kbench(c, kes[c]))
        t = time.perf_counter()
        for _ in range(samples): sess.run(None, feed)
        ores.append((time.perf_counter() - t) / samples * 1e6)
    om = np.median(ores)
    line = f"{m:18s} ORT {om/1e3:7.2f}ms"
    for c in clis:
        km = np.median(res[c]); line += f" | {os.path.basename(c)} {km/1e3:7.2f}ms x{km/om:.2f}"
    print(line, flush=True)
