//! One portable loop body compiled for each x86 tier: [`multiversion!`] defines an entry point
//! that runs the body built with AVX-512 or AVX2 enabled (so the compiler's vectorisation uses
//! the tier's width) where the CPU runs that tier, and the portable build elsewhere (scalar,
//! NEON through the baseline `target_feature`s, or a tier the CPU lacks).

/// `multiversion!(pub fn name / name_on(args) -> ret => body)` defines `name(args)` (the
/// detected ISA, [`super::isa`]) and `name_on(isa, args)` (the tests pass each tier in turn);
/// `body` is an `#[inline(always)]` function of `args`, so each tier's build inlines it.
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident / $on:ident $(<$($g:ident: $b:path),*>)? ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:ident) => {
        $(#[$m])*
        #[inline]
        #[allow(dead_code)]
        $vis fn $name $(<$($g: $b),*>)? ($($arg: $ty),*) $(-> $ret)? {
            $on $(::<$($g),*>)? ($crate::kernels::simd::isa(), $($arg),*)
        }

        #[doc = concat!("[`", stringify!($name), "`] compiled for `isa`: its AVX-512 or AVX2 build where `isa` is one of them and the CPU runs it, the portable build otherwise.")]
        $vis fn $on $(<$($g: $b),*>)? (isa: $crate::kernels::simd::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::kernels::simd::Isa;
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn avx512 $(<$($g: $b),*>)? ($($arg: $ty),*) $(-> $ret)? {
                    $body $(::<$($g),*>)? ($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2 $(<$($g: $b),*>)? ($($arg: $ty),*) $(-> $ret)? {
                    $body $(::<$($g),*>)? ($($arg),*)
                }
                match isa {
                    // SAFETY: AVX-512F/AVX2/FMA checked by `supported()`.
                    Isa::Avx512 if isa.supported() => return unsafe { avx512 $(::<$($g),*>)? ($($arg),*) },
                    // SAFETY: AVX2/FMA checked by `supported()`.
                    Isa::Avx2 | Isa::Avx2Vnni if isa.supported() => return unsafe { avx2 $(::<$($g),*>)? ($($arg),*) },
                    _ => {}
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = isa;
            $body $(::<$($g),*>)? ($($arg),*)
        }
    };
}

pub(crate) use multiversion;
