// Arithmetic of the f16 variant (modules start with `enable f16;`, compiled only on devices with
// SHADER_F16): both factors of every product are rounded to f16 (activations from the f32 arena;
// weights dequantised exactly in f32, then rounded once: exact for f16 weights), products are
// taken in f16 and summed in f16 at most four at a time (one packed `dot` of vec4<f16>), and
// everything longer accumulates in f32. So each product carries a few f16 roundings (u = 2⁻¹¹
// each) but no long sum is kept in f16. f16's range bounds the factors, products and
// four-product sums: beyond ±65504 they overflow, and below 6.1e-5 they lose relative precision
// (subnormals). Exponentials, maxima, normalisation and activations stay f32.

alias S = f16;
alias V4 = vec4<f16>;

fn to_s(x: f32) -> S {
    return f16(x);
}

fn to_v4(x: vec4<f32>) -> V4 {
    return vec4<f16>(x);
}

fn dot_v4(a: V4, b: V4) -> f32 {
    return f32(dot(a, b));
}

fn mul_s(a: S, b: S) -> f32 {
    return f32(a * b);
}

fn ws(w: Wd, r: u32, c: u32) -> S {
    return f16(wget(w, r, c));
}

fn wsflat(w: Wd, i: u32) -> S {
    return f16(wflat(w, i));
}
