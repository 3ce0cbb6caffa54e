// Embeddings: token lookup (+ position rows), and the patch gather of a patch embedding (the
// projection that follows is a dense dispatch).

// P: 2 ids_base, 3 y_base, 4 tokens, 5 d, 6 vocab, 7 has_pos, 8..11 table, 12..15 pos.
// per = tokens · d. Ids were range-checked on the host; a bad one reads row 0, never out of bounds.
@compute @workgroup_size(64)
fn embedding(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let d = pu(5u);
    let t = l / d;
    let j = l % d;
    let id = bitcast<i32>(act[pu(2u) + s * pu(4u) + t]);
    let row = select(0u, u32(id), id >= 0 && u32(id) < pu(6u));
    var v = wget(wdesc(8u), row, j);
    if pu(7u) == 1u {
        v += wget(wdesc(12u), t, j);
    }
    act[pu(3u) + g] = v;
}

// x [C, H, W] -> patches [T, C·p·p], token t = py·(W/p) + px, patch flattened in (c, i, j) order.
// P: 2 x_base, 3 y_base, 4 c, 5 h, 6 w, 7 p. per = C · H · W.
@compute @workgroup_size(64)
fn patch_gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let c = pu(4u);
    let h = pu(5u);
    let w = pu(6u);
    let p = pu(7u);
    let k = c * p * p;
    let t = l / k;
    let e = l % k;
    let ch = e / (p * p);
    let i = (e / p) % p;
    let j = e % p;
    let gw = w / p;
    let py = t / gw;
    let px = t % gw;
    act[pu(3u) + g] = act[pu(2u) + s * per + ch * h * w + (py * p + i) * w + px * p + j];
}
