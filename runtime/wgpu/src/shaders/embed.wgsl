// Embeddings: token lookup (+ position rows), and the patch gather of a patch embedding (the
// projection that follows is a dense dispatch).

// Parameters `EmbeddingP`: ids_base, y_base, tokens, d, vocab, has_pos, table, pos.
// per = tokens · d. Ids were range-checked on the host (-vocab..vocab, a negative one counting
// from the end); a bad one reads row 0, never out of bounds.
fn embedding_body(it: Item) {
    let prm = embedding_p();
    let t = it.l / prm.d;
    let j = it.l % prm.d;
    let tok = bitcast<i32>(act[prm.ids_base + it.s * prm.tokens + t]);
    let wrapped = select(tok, tok + i32(prm.vocab), tok < 0);
    let row = select(0u, u32(wrapped), wrapped >= 0 && u32(wrapped) < prm.vocab);
    var v = wget(prm.table, row, j);
    if prm.has_pos {
        v += wget(prm.pos, t, j);
    }
    act[prm.y_base + it.g] = v;
}

// x [C, H, W] -> patches [T, C·p·p], token t = py·(W/p) + px, patch flattened in (c, i, j) order.
// Parameters `PatchGatherP`: x_base, y_base, c, h, w, p. per = C · H · W.
fn patch_gather_body(it: Item) {
    let prm = patch_gather_p();
    let h = prm.h;
    let w = prm.w;
    let p = prm.p;
    let k = prm.c * p * p;
    let t = it.l / k;
    let e = it.l % k;
    let ch = e / (p * p);
    let i = (e / p) % p;
    let j = e % p;
    let gw = w / p;
    let py = t / gw;
    let px = t % gw;
    act[prm.y_base + it.g] = act[prm.x_base + it.s * pu(P_PER) + ch * h * w + (py * p + i) * w + px * p + j];
}

// Selection by index along one axis (`Gather`): x [outer, n, inner] per sample, k indices (f32
// integers; one in -n..0 counts from the end), y [outer, k, inner]. One thread per output
// element. An index that is not an integer in -n..n (which a kernel cannot report) gives zeros;
// the CPU backend reports it as an error.
// Parameters `GatherP`: x, y_base, n, k, inner, idx_const, idx, idx_w. per = outer · k · inner.
fn gather_body(it: Item) {
    let prm = gather_p();
    let inner = prm.inner;
    let k = prm.k;
    let e = it.l % inner;
    let j = (it.l / inner) % k;
    let o = it.l / (inner * k);
    var v: f32;
    if prm.idx_const {
        v = wflat(prm.idx_w, j);
    } else {
        v = act[prm.idx.base + it.s * prm.idx.stride + j];
    }
    let n = f32(prm.n);
    var out = 0.0;
    // In range and an integer (NaN fails every comparison).
    if v >= -n && v < n && v == trunc(v) {
        var r = i32(v);
        if r < 0 {
            r += i32(prm.n);
        }
        out = act[prm.x.base + it.s * prm.x.stride + (o * prm.n + u32(r)) * inner + e];
    }
    act[prm.y_base + it.g] = out;
}

// One piece of a concatenation (`Concat`): x [outer, run] per sample (run = n_i · inner) copied
// into its place in y, rows of `row` words (total · inner) from word `at` (offset · inner) of
// each; one dispatch a piece, one thread per piece element. Ids are copied as their bits.
// Parameters `ConcatP`: x, y, run, row, at. per = outer · run.
fn concat_body(it: Item) {
    let prm = concat_p();
    let o = it.l / prm.run;
    let j = it.l % prm.run;
    act[prm.y.base + it.s * prm.y.stride + o * prm.row + prm.at + j] = act[prm.x.base + it.s * prm.x.stride + it.l];
}
