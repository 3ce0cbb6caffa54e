// Fastformer's additive pooling (the projections, the softmax over tokens and W^R are other
// dispatches): scores, the per-head weighted sum of rows, and the row-wise product.

// alpha[s, head, t] = (rows[s, t, :] · w[head, :]) · scale.
// P: 2 rows_base, 3 rows_stride, 4 alpha_base, 5 t, 6 d, 7 heads, 8 scale, 12..15 w. per = heads · t.
@compute @workgroup_size(64)
fn ff_scores(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let t = pu(5u);
    let d = pu(6u);
    let head = l / t;
    let tok = l % t;
    act[pu(4u) + g] = wdot_part(wdesc(12u), head, pu(2u) + s * pu(3u) + tok * d, 1u, d, 0u, 1u) * pf(8u);
}

// out[s, col] = Σ_t alpha[s, head(col), t] · rows[s, t, col].
// P: 2 rows_base, 3 rows_stride, 4 alpha_base, 5 out_base, 6 t, 7 d, 8 heads. per = d.
@compute @workgroup_size(64)
fn ff_pool(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let t = pu(6u);
    let d = pu(7u);
    let h = pu(8u);
    let s = g / d;
    let col = g % d;
    let head = col / (d / h);
    let a = pu(4u) + (s * h + head) * t;
    let r = pu(2u) + s * pu(3u) + col;
    act[pu(5u) + g] = adot(a, 1u, r, d, t);
}

// rows[s, t, col] *= vec[s, col]. P: 2 rows_base, 3 rows_stride, 4 vec_base, 5 d. per = t · d.
@compute @workgroup_size(64)
fn ff_scale_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let d = pu(5u);
    act[pu(2u) + s * pu(3u) + l] *= act[pu(4u) + s * d + l % d];
}
