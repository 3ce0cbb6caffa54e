// Batched matrix product with broadcast batch axes: y[.., M, N] = a[.., M, K] · b, where b is
// [.., K, N] or [.., N, K] (transpose_b), an activation or a weight (flat row-major).
// P: 2 a_base, 3 a_stride, 4 b_kind (0 act, 1 weight), 5 b_base, 6 b_stride, 7 y_base, 8 m,
//    9 k, 10 n, 11 transpose_b, 12 batch_rank, 13..18 batch dims, 19..24 a strides,
//    25..30 b strides, 31..34 b weight. per = batches · m · n.
@compute @workgroup_size(64)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let m = pu(8u);
    let k = pu(9u);
    let n = pu(10u);
    let mn = m * n;
    var bi = l / mn;
    let i = (l % mn) / n;
    let j = l % n;
    var oa = 0u;
    var ob = 0u;
    for (var ax = pu(12u); ax > 0u; ax--) {
        let dim = pu(12u + ax);
        let v = bi % dim;
        bi = bi / dim;
        oa += v * pu(18u + ax);
        ob += v * pu(24u + ax);
    }
    let a = pu(2u) + s * pu(3u) + oa + i * k;
    let tb = pu(11u) == 1u;
    // b's column j: k elements from `b0`, `sb` apart.
    let b0 = ob + select(j, j * k, tb);
    let sb = select(n, 1u, tb);
    var acc: f32;
    if pu(4u) == 1u {
        acc = wflat_dot(wdesc(31u), b0, sb, a, k);
    } else {
        acc = adot(a, 1u, pu(5u) + s * pu(6u) + b0, sb, k);
    }
    act[pu(7u) + s * per + l] = acc;
}

// `matmul_tile`: the same product as a shared-memory tiled GEMM for products with work enough to
// fill a GPU (chosen by `Tuning::dense_tile_min_workgroups`, as `dense_tile`). One workgroup per
// (sample, batch item, 32 rows of a × 32 columns of b); per step of 32 k, the tile's a rows and b
// columns (b read down a column: `n` apart, or contiguous when transposed; a weight dequantised
// element by element) are staged in workgroup memory as the variant's vectors, zeros past k, and
// every thread takes rows row + 8i × columns col + 8j from there (`tile_step`, as `dense_tile`).
// Same P as `matmul`, plus 35 the output's per-sample stride (batches · m · n);
// per = batches · ceil(m / 32) · ceil(n / 32) · WG.
@compute @workgroup_size(64)
fn matmul_tile(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid3: vec3<u32>) {
    let at = tile_at(wid, nwg, lid3.x);
    if !at.live {
        return;
    }
    let s = at.s;
    let tile = at.tile;
    let row = at.row;
    let col = at.col;
    let m = pu(8u);
    let k = pu(9u);
    let n = pu(10u);
    let mt = (m + TILE - 1u) / TILE;
    let nt = (n + TILE - 1u) / TILE;
    var bi = tile / (mt * nt);
    let bmn = bi * m * n;
    let rt = ((tile % (mt * nt)) / nt) * TILE;
    let ct = (tile % nt) * TILE;
    var oa = 0u;
    var ob = 0u;
    for (var ax = pu(12u); ax > 0u; ax--) {
        let dim = pu(12u + ax);
        let v = bi % dim;
        bi = bi / dim;
        oa += v * pu(18u + ax);
        ob += v * pu(24u + ax);
    }
    let ab = pu(2u) + s * pu(3u) + oa;
    let tb = pu(11u) == 1u;
    let sb = select(n, 1u, tb);
    let weight = pu(4u) == 1u;
    let bb = select(pu(5u) + s * pu(6u) + ob, ob, weight);
    var acc = Block4(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var k0 = 0u; k0 < k; k0 += 4u * TILE_CH) {
        let c = k0 + 4u * col;
        for (var q = 0u; q < 4u; q++) {
            let item = row + 8u * q;
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
                        wv[e] = wflat(wdesc(31u), bw);
                    } else {
                        wv[e] = act[bw];
                    }
                }
            }
            tile_x[col * TILE + item] = to_v4(xv);
            tile_w[col * TILE + item] = to_v4(wv);
        }
        workgroupBarrier();
        acc = tile_step(acc, row, col);
        workgroupBarrier();
    }
    let y = pu(7u) + s * pu(35u) + bmn;
    let r = vec4<u32>(rt + row) + vec4<u32>(0u, 8u, 16u, 24u);
    matmul_tile_store(y, r.x, ct + col, m, n, acc.a0);
    matmul_tile_store(y, r.y, ct + col, m, n, acc.a1);
    matmul_tile_store(y, r.z, ct + col, m, n, acc.a2);
    matmul_tile_store(y, r.w, ct + col, m, n, acc.a3);
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
