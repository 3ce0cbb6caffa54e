// Batched matrix product with broadcast batch axes: y[.., M, N] = a[.., M, K] · b, where b is
// [.., K, N] or [.., N, K] (transpose_b), an activation or a weight (flat row-major).
// Parameters `MatmulP`: a, b_kind (0 activation b, 1 weight b_w), y_base, m, k, n, transpose_b,
// batch_rank, and per batch axis dims, a_strides, b_strides. per = batches · m · n.

// The offsets of batch item `bi` in a and in b (broadcast batch axes: stride 0).
fn batch_offsets(bi: u32) -> vec2<u32> {
    var rest = bi;
    var o = vec2<u32>(0u);
    for (var ax = matmul_p().batch_rank; ax > 0u; ax--) {
        let dim = matmul_p_dims(ax - 1u);
        let v = rest % dim;
        rest = rest / dim;
        o += v * vec2<u32>(matmul_p_a_strides(ax - 1u), matmul_p_b_strides(ax - 1u));
    }
    return o;
}

fn matmul_body(it: Item) {
    let prm = matmul_p();
    let s = it.s;
    let l = it.l;
    let k = prm.k;
    let n = prm.n;
    let mn = prm.m * n;
    let i = (l % mn) / n;
    let j = l % n;
    let off = batch_offsets(l / mn);
    let a = prm.a.base + s * prm.a.stride + off.x + i * k;
    let tb = prm.transpose_b;
    // b's column j: k elements from `b0`, `sb` apart.
    let b0 = off.y + select(j, j * k, tb);
    let sb = select(n, 1u, tb);
    var acc: f32;
    if prm.b_kind == 1u {
        acc = wflat_dot(prm.b_w, b0, sb, a, k);
    } else {
        acc = adot(a, 1u, prm.b.base + s * prm.b.stride + b0, sb, k);
    }
    act[prm.y_base + s * pu(P_PER) + l] = acc;
}

// `matmul_tile`: the same product as a shared-memory tiled GEMM for products with work enough to
// fill a GPU (chosen by `Tuning::dense_tile_min_workgroups`, as `dense_tile`). One workgroup per
// (sample, batch item, 32 rows of a × 32 columns of b); per step of 32 k, the tile's a rows and b
// columns (b read down a column: `n` apart, or contiguous when transposed; a weight dequantised
// element by element) are staged in workgroup memory as the variant's vectors, zeros past k, and
// every thread takes rows row + 8i × columns col + 8j from there (`tile_step`, as `dense_tile`).
// The parameters of `matmul`, plus `MatmulTileP.y_stride`, the output's per-sample stride
// (batches · m · n); per = batches · ceil(m / 32) · ceil(n / 32) · WG.
fn matmul_tile_body(at: TileAt) {
    let prm = matmul_p();
    let m = prm.m;
    let k = prm.k;
    let n = prm.n;
    let mt = (m + TILE - 1u) / TILE;
    let nt = (n + TILE - 1u) / TILE;
    let bi = at.tile / (mt * nt);
    let bmn = bi * m * n;
    let rt = ((at.tile % (mt * nt)) / nt) * TILE;
    let ct = (at.tile % nt) * TILE;
    let off = batch_offsets(bi);
    let ab = prm.a.base + at.s * prm.a.stride + off.x;
    let tb = prm.transpose_b;
    let sb = select(n, 1u, tb);
    let weight = prm.b_kind == 1u;
    let bb = select(prm.b.base + at.s * prm.b.stride + off.y, off.y, weight);
    var acc = block0();
    for (var k0 = 0u; k0 < k; k0 += 4u * TILE_CH) {
        let c = k0 + 4u * at.col;
        for (var q = 0u; q < 4u; q++) {
            let item = at.row + 8u * q;
            let a_row = ab + min(rt + item, m - 1u) * k;
            let bc = min(ct + item, n - 1u);
            let b_col = bb + select(bc, bc * k, tb);
            var xv = vec4<f32>(0.0);
            var wv = vec4<f32>(0.0);
            for (var e = 0u; e < 4u; e++) {
                if c + e < k {
                    xv[e] = act[a_row + c + e];
                    let bw = b_col + (c + e) * sb;
                    if weight {
                        wv[e] = wflat(prm.b_w, bw);
                    } else {
                        wv[e] = act[bw];
                    }
                }
            }
            tile_put(at, item, to_v4(xv), to_v4(wv));
        }
        acc = tile_sync(acc, at);
    }
    let y = prm.y_base + at.s * matmul_tile_p().y_stride + bmn;
    let r = vec4<u32>(rt + at.row) + vec4<u32>(0u, 8u, 16u, 24u);
    matmul_tile_store(y, r.x, ct + at.col, m, n, acc.a0);
    matmul_tile_store(y, r.y, ct + at.col, m, n, acc.a1);
    matmul_tile_store(y, r.z, ct + at.col, m, n, acc.a2);
    matmul_tile_store(y, r.w, ct + at.col, m, n, acc.a3);
}

// Row r's columns c0, c0 + 8, c0 + 16, c0 + 24 of a tile, those in range.
fn matmul_tile_store(y: u32, r: u32, c0: u32, m: u32, n: u32, a: vec4<f32>) {
    if r >= m {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if c0 + 8u * j < n {
            act[y + r * n + c0 + 8u * j] = a[j];
        }
    }
}
