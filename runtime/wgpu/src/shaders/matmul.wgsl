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
