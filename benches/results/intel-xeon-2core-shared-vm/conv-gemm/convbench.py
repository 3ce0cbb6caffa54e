import sys, json, subprocess, time, os
import numpy as np, torch, onnxruntime as ort
torch.manual_seed(0)
W = "/tmp/h2/convs"
# name: (cin, cout, k, stride, pad, hw)
SHAPES = {
 "stem7s2": (3, 64, 7, 2, 3, 224),
 "r18_l1_3x3_64_56": (64, 64, 3, 1, 1, 56),
 "r18_l2_3x3s2_64_128": (64, 128, 3, 2, 1, 56),
 "r18_l2_3x3_128_28": (128, 128, 3, 1, 1, 28),
 "r18_l3_3x3_256_14": (256, 256, 3, 1, 1, 14),
 "r18_l4_3x3_512_7": (512, 512, 3, 1, 1, 7),
 "r50_1x1_64_256_56": (64, 256, 1, 1, 0, 56),
 "r50_1x1_256_64_56": (256, 64, 1, 1, 0, 56),
 "r50_1x1_1024_256_14": (1024, 256, 1, 1, 0, 14),
}
def flops(c):
    cin, cout, k, s, p, hw = c
    o = (hw + 2*p - k)//s + 1
    return 2*cin*cout*k*k*o*o
def make(name):
    cin, cout, k, s, p, hw = SHAPES[name]
    on = f"{W}/{name}.onnx"
    if not os.path.exists(on):
        m = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, k, s, p), torch.nn.ReLU()).eval()
        torch.onnx.export(m, torch.randn(1, cin, hw, hw), on, opset_version=17, dynamo=False)
    return on
def kbench(cli, kes, samples):
    r = subprocess.run([cli, "bench", kes, "--samples", str(samples), "--reps", "1", "--threads", "1", "--batch", "1", "--json"], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["us_per_sample"]
clis = sys.argv[1].split(",")
names = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else list(SHAPES)
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
for name in names:
    on = make(name)
    kes = {}
    for i, cli in enumerate(clis):
        kes[cli] = f"{W}/{name}.{i}.kes"
        subprocess.run([cli, "convert", on, "-o", kes[cli]], check=True, capture_output=True)
    sess = ort.InferenceSession(on, so, providers=["CPUExecutionProvider"])
    cin, cout, k, s, p, hw = SHAPES[name]
    feed = {sess.get_inputs()[0].name: np.random.default_rng(0).random((1, cin, hw, hw), dtype=np.float32)}
    fl = flops(SHAPES[name])
    samples = max(5, int(0.15e9 / fl * 20))  # ~ few tens of ms at 100 GFLOP/s... 
    samples = max(5, int(30e-3 / (fl / 100e9)))
    res = {c: [] for c in clis}; ores = []
    for r in range(rounds):
        for cli in clis:
            res[cli].append(kbench(cli, kes[cli], samples))
        t = time.perf_counter()
        for _ in range(samples): sess.run(None, feed)
        ores.append((time.perf_counter() - t) / samples * 1e6)
    om = np.median(ores)
    line = f"{name:24s} ORT {om:8.1f}us {fl/om/1e3:6.1f}GF/s"
    for cli in clis:
        km = np.median(res[cli])
        line += f" | {os.path.basename(cli)} {km:8.1f}us {fl/km/1e3:6.1f}GF/s x{km/om:.2f}"
    print(line, flush=True)
