// Element-wise kernels: unary functions, and a strided kernel for binary ops with numpy
// broadcasting (either operand may be a weight) and for transposes (a permuted copy).

// P: 2 x_base, 3 y_base, 4 op. per = n (elements per sample).
@compute @workgroup_size(64)
fn unary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let x = act[pu(2u) + g];
    var y: f32;
    switch pu(4u) {
        case 0u: { y = max(x, 0.0); }
        case 1u: { y = gelu(x); }
        case 2u: { y = gelu_tanh(x); }
        case 3u: { y = sigmoid(x); }
        case 4u: { y = tanh(x); }
        case 5u: { y = exp(x); }
        case 6u: { y = log(x); }
        case 7u: { y = sqrt(x); }
        case 8u: { y = -x; }
        case 9u: { y = abs(x); }
        case 10u: { y = erf_(x); }
        case 11u: { y = 1.0 / x; }
        case 12u: { y = x * sigmoid(x); }
        case 13u: { y = x * clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0); }
        case 14u: { y = clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0); }
        // Unreachable: the loader rejects unknown codes.
        default: { y = x; }
    }
    act[pu(3u) + g] = y;
}

// An operand of the strided kernel, its block at word `o` of P:
// o kind (0 activation, 1 weight), o+1 base, o+2 sample stride, o+3..o+8 strides per output
// axis, o+9..o+12 weight descriptor.
fn operand(o: u32, s: u32, idx: array<u32, 6>, rank: u32) -> f32 {
    var off = 0u;
    for (var k = 0u; k < rank; k++) {
        off += idx[k] * pu(o + 3u + k);
    }
    if pu(o) == 1u {
        return wflat(wdesc(o + 9u), off);
    }
    return act[pu(o + 1u) + s * pu(o + 2u) + off];
}

fn binary_fn(op: u32, a: f32, b: f32) -> f32 {
    switch op {
        case 0u: { return a + b; }
        case 1u: { return a - b; }
        case 2u: { return a * b; }
        case 3u: { return a / b; }
        case 4u: { return max(a, b); }
        case 5u: { return min(a, b); }
        default: {
            // powf: exact for integer exponents of negative bases, NaN otherwise (as libm).
            if b == 0.0 {
                return 1.0;
            }
            if a < 0.0 {
                if fract(b) != 0.0 {
                    return bitcast<f32>(0x7fc00000u);
                }
                let m = pow(-a, b);
                return select(m, -m, fract(b * 0.5) != 0.0);
            }
            return pow(a, b);
        }
    }
}

// P: 2 y_base, 3 op (0..6 binary, 100 copy of operand a, 101 window of operand a), 4 rank,
//    5..10 output dims, 11..23 operand a, 24..36 operand b, 37..39 the window (axis, first
//    output index, count), 40 window plus operand b. per = output elements.
@compute @workgroup_size(64)
fn strided(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    var l = g % per;
    let rank = pu(4u);
    var idx = array<u32, 6>(0u, 0u, 0u, 0u, 0u, 0u);
    for (var k = rank; k > 0u; k--) {
        let dim = pu(4u + k);
        idx[k - 1u] = l % dim;
        l = l / dim;
    }
    let op = pu(3u);
    if op == 101u {
        // A window on axis P37: output indices P38..P38+P39 read operand a, the rest are zero;
        // plus operand b at the output's index when P40 is 1 (an Add fused after the slice).
        let k = pu(37u);
        let j = idx[k] - pu(38u);
        var y = 0.0;
        if pu(40u) == 1u {
            y = operand(24u, s, idx, rank);
        }
        if idx[k] >= pu(38u) && j < pu(39u) {
            idx[k] = j;
            y += operand(11u, s, idx, rank);
        }
        act[pu(2u) + g] = y;
        return;
    }
    let a = operand(11u, s, idx, rank);
    var y = a;
    if op != 100u {
        y = binary_fn(op, a, operand(24u, s, idx, rank));
    }
    act[pu(2u) + g] = y;
}
