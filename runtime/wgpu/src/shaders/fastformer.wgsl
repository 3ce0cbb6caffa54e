// Fastformer's additive pooling (the projections, the softmax over tokens and W^R are other
// dispatches): scores, the per-head weighted sum of rows, and the row-wise product.

// alpha[s, head, t] = (rows[s, t, :] · w[head, :]) · scale.
// Parameters `FfScoresP`: rows, alpha_base, t, d, heads, scale, w. per = heads · t.
fn ff_scores_body(it: Item) {
    let prm = ff_scores_p();
    let head = it.l / prm.t;
    let tok = it.l % prm.t;
    let x = prm.rows.base + it.s * prm.rows.stride + tok * prm.d;
    act[prm.alpha_base + it.g] = wdot_part(prm.w, head, x, 1u, prm.d, 0u, 1u) * prm.scale;
}

// out[s, col] = Σ_t alpha[s, head(col), t] · rows[s, t, col].
// Parameters `FfPoolP`: rows, alpha_base, out_base, t, d, heads. per = d.
fn ff_pool_body(it: Item) {
    let prm = ff_pool_p();
    let t = prm.t;
    let d = prm.d;
    let h = prm.heads;
    let head = it.l / (d / h);
    let a = prm.alpha_base + (it.s * h + head) * t;
    let r = prm.rows.base + it.s * prm.rows.stride + it.l;
    act[prm.out_base + it.g] = adot(a, 1u, r, d, t);
}

// rows[s, t, col] *= vec[s, col]. Parameters `FfScaleRowsP`: rows, vec_base, d. per = t · d.
fn ff_scale_rows_body(it: Item) {
    let prm = ff_scale_rows_p();
    act[prm.rows.base + it.s * prm.rows.stride + it.l] *= act[prm.vec_base + it.s * prm.d + it.l % prm.d];
}
