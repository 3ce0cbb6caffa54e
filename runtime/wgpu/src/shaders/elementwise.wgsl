// Element-wise kernels: unary functions, and a strided kernel for binary ops with numpy
// broadcasting (either operand may be a weight) and for transposes (a permuted copy).

// Parameters `UnaryP`: x_base, y_base, op. per = n (elements per sample).
fn unary_body(it: Item) {
    let prm = unary_p();
    let x = act[prm.x_base + it.g];
    let y = unary_fn(prm.op, x);
    act[prm.y_base + it.g] = y;
}

// Parameters `ChainP`: x_base, y_base, n_steps, channels, inner, steps (two 16-bit step codes a
// word: bits 0-7 the function, 8-9 the form, 0 unary, 1 f(v, c), 2 f(c, v), bit 10 one constant
// per channel), c (the constants in step order). per = n (elements per sample).
fn chain_body(it: Item) {
    let prm = chain_p();
    var v = act[prm.x_base + it.g];
    let ch = (it.l / prm.inner) % prm.channels;
    var off = 0u;
    for (var k = 0u; k < prm.n_steps; k++) {
        let code = (chain_p_steps(k / 2u) >> (16u * (k % 2u))) & 0xffffu;
        let f = code & 0xffu;
        let form = (code >> 8u) & 3u;
        if form == 0u {
            v = unary_fn(f, v);
            continue;
        }
        var c: f32;
        if (code & 0x400u) != 0u {
            c = wflat(prm.c, off + ch);
            off += prm.channels;
        } else {
            c = wflat(prm.c, off);
            off += 1u;
        }
        v = select(binary_fn(f, v, c), binary_fn(f, c, v), form == 2u);
    }
    act[prm.y_base + it.g] = v;
}

// An operand of the strided kernel (`StridedP`'s a_* or b_* fields): kind (0 an activation
// region r, 1 a weight w), read with the strides per output axis whose first word is `strides`.
fn operand(kind: u32, r: Reg, w: Wd, strides: u32, s: u32, idx: array<u32, MAX_RANK>, rank: u32) -> f32 {
    var off = 0u;
    for (var k = 0u; k < rank; k++) {
        off += idx[k] * pu(strides + k);
    }
    if kind == 1u {
        return wflat(w, off);
    }
    return act[r.base + s * r.stride + off];
}

fn operand_a(s: u32, idx: array<u32, MAX_RANK>, rank: u32) -> f32 {
    let prm = strided_p();
    return operand(prm.a_kind, prm.a, prm.a_w, STRIDED_A_STRIDES, s, idx, rank);
}

fn operand_b(s: u32, idx: array<u32, MAX_RANK>, rank: u32) -> f32 {
    let prm = strided_p();
    return operand(prm.b_kind, prm.b, prm.b_w, STRIDED_B_STRIDES, s, idx, rank);
}

// `unary_fn` and `binary_fn` are generated from the format's element-wise tables
// (kestrel_rt_format::ops::{UnaryOp, BinaryOp}) and appended to this family's prelude; these are the
// helpers their rows call.

// max and min that propagate NaN (ONNX's Max and Min, and the clamp of a layer: Clip(NaN) = NaN);
// WGSL's max and min may return either operand for a NaN. Tested on the bits, as pow_.
fn nan_either(a: f32, b: f32) -> bool {
    return (bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u || (bitcast<u32>(b) & 0x7fffffffu) > 0x7f800000u;
}

fn max_(a: f32, b: f32) -> f32 {
    return select(max(a, b), bitcast<f32>(0x7fc00000u), nan_either(a, b));
}

fn min_(a: f32, b: f32) -> f32 {
    return select(min(a, b), bitcast<f32>(0x7fc00000u), nan_either(a, b));
}

// powf: exact for integer exponents of negative bases, NaN otherwise, and C's special values
// for NaN, ±∞ and ±0 operands (as libm); WGSL's pow is defined for finite positive bases only.
// The classes are tested on the bits: shader compilers may assume that floats are finite.
fn pow_(a: f32, b: f32) -> f32 {
    let inf = bitcast<f32>(0x7f800000u);
    let ab = bitcast<u32>(a) & 0x7fffffffu;
    let bb = bitcast<u32>(b) & 0x7fffffffu;
    // b = ±0 or a = 1: 1, even with a NaN.
    if bb == 0u || bitcast<u32>(a) == 0x3f800000u {
        return 1.0;
    }
    if ab > 0x7f800000u || bb > 0x7f800000u {
        return bitcast<f32>(0x7fc00000u);
    }
    let negative = (bitcast<u32>(a) >> 31u) == 1u;
    if bb == 0x7f800000u {
        // b = ±∞: 1 for a = −1; 0 or ∞ as |a| > 1 agrees with b's sign.
        if ab == 0x3f800000u {
            return 1.0;
        }
        return select(0.0, inf, (ab > 0x3f800000u) == (b > 0.0));
    }
    let odd = fract(b) == 0.0 && fract(b * 0.5) != 0.0;
    if ab == 0x7f800000u || ab == 0u {
        // a = ±∞ (∞ for b > 0) or ±0 (∞ for b < 0), negative for a negative base and odd b.
        let m = select(0.0, inf, (ab == 0u) == (b < 0.0));
        return select(m, -m, negative && odd);
    }
    if negative {
        if fract(b) != 0.0 {
            return bitcast<f32>(0x7fc00000u);
        }
        let m = pow(-a, b);
        return select(m, -m, odd);
    }
    return pow(a, b);
}

// C's fmod: a − b·trunc(a/b), with a's sign; a finite a by ±∞ is a (the formula's ∞·0 would
// make it NaN). The bits are tested: shader compilers may assume that floats are finite.
fn fmod_(a: f32, b: f32) -> f32 {
    if ((bitcast<u32>(b) & 0x7fffffffu) == 0x7f800000u && (bitcast<u32>(a) & 0x7fffffffu) < 0x7f800000u) {
        return a;
    }
    return a - b * trunc(a / b);
}

// Parameters `StridedP`: y_base, op (0..6 binary, 100 copy of operand a, 101 window of operand
// a), rank, dims (the output's), operands a and b, the window (window_axis, window_first output
// index, window_count), window_add (the window plus operand b). per = output elements.
fn strided_body(it: Item) {
    let prm = strided_p();
    let s = it.s;
    var l = it.l;
    let rank = prm.rank;
    var idx: array<u32, MAX_RANK>;
    for (var k = rank; k > 0u; k--) {
        let dim = strided_p_dims(k - 1u);
        idx[k - 1u] = l % dim;
        l = l / dim;
    }
    let op = prm.op;
    if op == 101u {
        // A window on axis `window_axis`: output indices window_first .. + window_count read
        // operand a, the rest are zero; plus operand b at the output's index when `window_add`
        // (an Add fused after the slice).
        let k = prm.window_axis;
        let j = idx[k] - prm.window_first;
        var y = 0.0;
        if prm.window_add {
            y = operand_b(s, idx, rank);
        }
        if idx[k] >= prm.window_first && j < prm.window_count {
            idx[k] = j;
            y += operand_a(s, idx, rank);
        }
        act[prm.y_base + it.g] = y;
        return;
    }
    let a = operand_a(s, idx, rank);
    var y = a;
    if op != 100u {
        y = binary_fn(op, a, operand_b(s, idx, rank));
    }
    act[prm.y_base + it.g] = y;
}
