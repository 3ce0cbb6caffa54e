// Arithmetic of the f32 variant of every family: products and sums in f32 (the CPU's
// arithmetic). `arith_f16.wgsl` defines the same names for the f16 variant.

alias S = f32;
alias V4 = vec4<f32>;

fn to_s(x: f32) -> S {
    return x;
}

fn to_v4(x: vec4<f32>) -> V4 {
    return x;
}

fn dot_v4(a: V4, b: V4) -> f32 {
    return dot(a, b);
}

fn mul_s(a: S, b: S) -> f32 {
    return a * b;
}

fn ws(w: Wd, r: u32, c: u32) -> S {
    return wget(w, r, c);
}

fn wsflat(w: Wd, i: u32) -> S {
    return wflat(w, i);
}
