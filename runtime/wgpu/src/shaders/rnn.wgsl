// Recurrent layers: ONNX LSTM (gates i, o, f, c; optional peepholes) and GRU (gates z, r, h;
// either linear_before_reset), default activations. The input projection of every step, xw[s, t, :] = x[s, t, :] · Wᵀ
// for both directions' gate rows at once, is a dense dispatch before this kernel; the recurrence
// runs here, one workgroup per (sample, direction) walking the T steps in order (reversed for the
// reverse direction). Each step has two phases separated by storage barriers: (1) every gate row
// j (threads j ≡ lid mod WG) adds its recurrent product R[j] · h (`wdot_part`) and both biases to
// its projection; (2) every hidden unit k (threads k ≡ lid mod WG) applies the gates and updates
// its h[k] and c[k]. A GRU whose reset gate acts on the state (linear_before_reset = 0) needs r
// before its candidate's product: phase 1 leaves the candidate rows' biased projections, then
// every unit k stores r[k]·h[k] and every candidate row adds R_h[j] · (r ⊙ h), each behind a
// barrier, before phase 2.
// Parameters `RnnP`: regions xw, y, state; t, hidden, dirs, cell (0 LSTM, 1 GRU), direction
//    (0 forward, 1 reverse, 2 bidirectional), output (0 Y [T, dirs, H], 1 Y_h [dirs, H], 2 Y_c
//    [dirs, H]), has_h0, has_c0, r (R [dirs·G·H, H]), bias (B [dirs, 2·G·H]), h0 [dirs, H],
//    c0 [dirs, H], reset_state (GRU: the reset gate on the state), has_p, p (LSTM peepholes
//    [dirs, 3H]: P_i, P_o, P_f).
//    xw rows are dirs·G·H wide. State per sample: gates [dirs, G·H], the GRU's recurrent
//    candidate term (or r ⊙ h) [dirs, H], h [dirs, H], c [dirs, H]. per = dirs · WG (threads).

// tanh with relative accuracy near 0 (Cephes' odd polynomial below 0.625), else from e^(−2|x|)
// (never overflows; ±1 for large |x|).
fn tanh_(x: f32) -> f32 {
    let a = abs(x);
    if a < 0.625 {
        let z = x * x;
        let p = (((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z + 1.33314422036e-1) * z
            - 3.33332819422e-1;
        return x + x * z * p;
    }
    let e = exp(-2.0 * a);
    let t = (1.0 - e) / (1.0 + e);
    return select(t, -t, x < 0.0);
}

fn rnn_body(at: RowAt) {
    let prm = rnn_p();
    let dirs = prm.dirs;
    let lid = at.lid;
    let s = at.row / dirs;
    let d = at.row % dirs;
    let t_len = prm.t;
    let h_n = prm.hidden;
    let gru = prm.cell == 1u;
    let reset_state = gru && prm.reset_state;
    let peep = prm.has_p;
    let g_n = select(4u, 3u, gru) * h_n;
    let xw = prm.xw.base + s * prm.xw.stride;
    let y = prm.y.base + s * prm.y.stride;
    let st = prm.state.base + s * prm.state.stride;
    let gbuf = st + d * g_n;
    let ebuf = st + dirs * g_n + d * h_n;
    let hbuf = st + dirs * g_n + dirs * h_n + d * h_n;
    let cbuf = st + dirs * g_n + 2u * dirs * h_n + d * h_n;
    let rw = prm.r;
    let bw = prm.bias;
    let reversed = prm.direction == 1u || (prm.direction == 2u && d == 1u);
    let output = prm.output;
    for (var k = lid; k < h_n; k += WG) {
        var h0 = 0.0;
        if prm.has_h0 {
            h0 = wget(prm.h0, d, k);
        }
        var c0 = 0.0;
        if prm.has_c0 {
            c0 = wget(prm.c0, d, k);
        }
        act[hbuf + k] = h0;
        act[cbuf + k] = c0;
    }
    storageBarrier();
    for (var step = 0u; step < t_len; step++) {
        let t = select(step, t_len - 1u - step, reversed);
        let xrow = xw + t * dirs * g_n + d * g_n;
        // Phase 1: gate pre-activations.
        for (var j = lid; j < g_n; j += WG) {
            let xv = act[xrow + j] + wget(bw, d, j);
            let rb = wget(bw, d, g_n + j);
            if reset_state && j >= 2u * h_n {
                // Its product waits for r: the biases now, R_h · (r ⊙ h) below.
                act[gbuf + j] = xv + rb;
                continue;
            }
            let rh = wdot_part(rw, d * g_n + j, hbuf, 1u, h_n, 0u, 1u) + rb;
            if gru && j >= 2u * h_n {
                // The candidate keeps its recurrent term apart: r ⊙ (h R_hᵀ + Rb_h).
                act[gbuf + j] = xv;
                act[ebuf + j - 2u * h_n] = rh;
            } else {
                act[gbuf + j] = xv + rh;
            }
        }
        storageBarrier();
        if reset_state {
            for (var k = lid; k < h_n; k += WG) {
                act[ebuf + k] = sigmoid(act[gbuf + h_n + k]) * act[hbuf + k];
            }
            storageBarrier();
            for (var j = 2u * h_n + lid; j < g_n; j += WG) {
                act[gbuf + j] += wdot_part(rw, d * g_n + j, ebuf, 1u, h_n, 0u, 1u);
            }
            storageBarrier();
        }
        // Phase 2: the state update of every hidden unit.
        for (var k = lid; k < h_n; k += WG) {
            var h: f32;
            if reset_state {
                let z = sigmoid(act[gbuf + k]);
                let n = tanh_(act[gbuf + 2u * h_n + k]);
                h = n + z * (act[hbuf + k] - n);
            } else if gru {
                let z = sigmoid(act[gbuf + k]);
                let r = sigmoid(act[gbuf + h_n + k]);
                let n = tanh_(act[gbuf + 2u * h_n + k] + r * act[ebuf + k]);
                h = n + z * (act[hbuf + k] - n);
            } else {
                // Peepholes: i and f see the previous cell state, o the new one.
                var pi = 0.0;
                var po = 0.0;
                var pf = 0.0;
                if peep {
                    pi = wget(prm.p, d, k);
                    po = wget(prm.p, d, h_n + k);
                    pf = wget(prm.p, d, 2u * h_n + k);
                }
                let c_prev = act[cbuf + k];
                let i = sigmoid(act[gbuf + k] + pi * c_prev);
                let f = sigmoid(act[gbuf + 2u * h_n + k] + pf * c_prev);
                let cc = tanh_(act[gbuf + 3u * h_n + k]);
                let c = f * c_prev + i * cc;
                act[cbuf + k] = c;
                let o = sigmoid(act[gbuf + h_n + k] + po * c);
                h = o * tanh_(c);
            }
            act[hbuf + k] = h;
            if output == 0u {
                act[y + (t * dirs + d) * h_n + k] = h;
            }
        }
        storageBarrier();
    }
    if output != 0u {
        let src = select(hbuf, cbuf, output == 2u);
        for (var k = lid; k < h_n; k += WG) {
            act[y + d * h_n + k] = act[src + k];
        }
    }
}
