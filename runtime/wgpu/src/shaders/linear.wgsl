// Dense layers: y[s, r, o] = act(Σ_i x[s, r, i] · W[o, i] + b[o]) (+ add[s, r, o]).
// P: 2 x_base, 3 x_stride, 4 y_base, 5 y_stride, 6 in, 7 out, 8 act, 9 has_bias,
//    10 has_add, 11 add_base, 12 add_stride, 16..19 W, 20..23 b. per = rows · out.

@compute @workgroup_size(64)
fn dense(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let inp = pu(6u);
    let out = pu(7u);
    let r = l / out;
    let o = l % out;
    var v = wdot(wdesc(16u), o, pu(2u) + s * pu(3u) + r * inp, inp);
    if pu(9u) == 1u {
        v += wflat(wdesc(20u), o);
    }
    v = activate(pu(8u), v);
    if pu(10u) == 1u {
        v += act[pu(11u) + s * pu(12u) + l];
    }
    act[pu(4u) + s * pu(5u) + l] = v;
}
