//! Every WGSL module variant (the shared preamble, the variant's arithmetic and the family's
//! kernels: f32 for every family, f16 for the dot-product families), and so every entry point,
//! parsed and validated by naga and translated to SPIR-V (Vulkan, Android) and to MSL (Metal,
//! Apple) — no device needed, so Metal portability is checked on Linux. Kernels are specialised
//! only through their uniform parameter block (no pipeline constants), so one module per family
//! variant covers every shape.

use kestrel_rt_wgpu::{Arith, Family, Kernel, Variant};
use naga::back::{msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};

/// The capabilities a variant may use: none for f32 (so an f32 module that used f16 by mistake
/// fails here), `SHADER_FLOAT16` for f16.
/// `SUBGROUP` is added for the families that need it ([`Family::needs_subgroups`]) and only
/// those, so a subgroup operation anywhere else fails here too.
fn capabilities(f: Family, a: Arith) -> Capabilities {
    let arith = match a {
        Arith::F32 => Capabilities::empty(),
        Arith::F16 => Capabilities::SHADER_FLOAT16,
    };
    if f.needs_subgroups() {
        arith | Capabilities::SUBGROUP
    } else {
        arith
    }
}

fn module(f: Family, a: Arith) -> (naga::Module, naga::valid::ModuleInfo) {
    let src = f.source(a).unwrap_or_else(|| panic!("{f:?} has no {a:?} variant"));
    let module =
        naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{f:?} {a:?}: {}", e.emit_to_string(&src)));
    let info = Validator::new(ValidationFlags::all(), capabilities(f, a))
        .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
        .subgroup_operations(naga::valid::SubgroupOperationSet::all())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{f:?} {a:?}: {}", e.emit_to_string(&src)));
    (module, info)
}

fn family_variants() -> Vec<(Family, Arith)> {
    Family::ALL.iter().flat_map(|&f| f.variants().iter().map(move |&a| (f, a))).collect()
}

#[test]
fn variants_are_the_declared_ones() {
    let with_f16: Vec<Family> = Family::ALL.iter().copied().filter(|f| f.has_f16()).collect();
    assert_eq!(
        with_f16,
        [Family::Linear, Family::LinearSg, Family::MatMul, Family::Conv, Family::Attention, Family::Fastformer],
        "the dot-product families have f16 variants"
    );
    for &f in Family::ALL {
        assert!(f.source(Arith::F32).is_some(), "{f:?}: every family has an f32 variant");
        assert_eq!(f.source(Arith::F16).is_some(), f.has_f16(), "{f:?}");
        if let Some(src) = f.source(Arith::F16) {
            assert!(src.starts_with("enable f16;"), "{f:?}: the f16 module enables f16 first");
        }
        assert!(!f.source(Arith::F32).unwrap().contains("f16;"), "{f:?}: the f32 module enables nothing");
    }
    // Variant::of falls back to f32 for families without f16; Variant::all lists each once.
    assert_eq!(Variant::of(Kernel::Unary, Arith::F16).arith(), Arith::F32);
    assert_eq!(Variant::of(Kernel::Dense, Arith::F16).arith(), Arith::F16);
    let all = Variant::all();
    let f16 = Kernel::ALL.iter().filter(|k| k.family().has_f16()).count();
    assert_eq!(all.len(), Kernel::ALL.len() + f16);
    for v in &all {
        assert_eq!(Variant::of(v.kernel(), v.arith()), *v);
    }
}

#[test]
fn every_kernel_is_an_entry_point_of_every_variant_of_its_family() {
    for v in Variant::all() {
        let k = v.kernel();
        let (m, _) = module(k.family(), v.arith());
        assert!(
            m.entry_points.iter().any(|e| e.name == k.entry() && e.stage == naga::ShaderStage::Compute),
            "{v:?}: no compute entry point `{}` in {:?}",
            k.entry(),
            k.family()
        );
    }
    // And every entry point has a key.
    for (f, a) in family_variants() {
        let (m, _) = module(f, a);
        for e in &m.entry_points {
            assert!(
                Kernel::ALL.iter().any(|k| k.family() == f && k.entry() == e.name),
                "{f:?} {a:?}: `{}` has no Kernel key",
                e.name
            );
        }
    }
}

#[test]
fn f16_variants_do_f16_arithmetic_and_f32_variants_do_not() {
    let uses_f16 = |m: &naga::Module| {
        m.types.iter().any(|(_, t)| match t.inner {
            naga::TypeInner::Scalar(s) | naga::TypeInner::Vector { scalar: s, .. } => {
                s.kind == naga::ScalarKind::Float && s.width == 2
            }
            _ => false,
        })
    };
    for (f, a) in family_variants() {
        let (m, _) = module(f, a);
        assert_eq!(uses_f16(&m), a == Arith::F16, "{f:?} {a:?}");
    }
}

#[test]
fn every_variant_translates_to_spirv() {
    for (f, a) in family_variants() {
        let (m, info) = module(f, a);
        let words =
            spv::write_vec(&m, &info, &spv::Options::default(), None).unwrap_or_else(|e| panic!("{f:?} {a:?}: {e}"));
        assert_eq!(words[0], 0x0723_0203, "{f:?} {a:?}: SPIR-V magic");
        assert!(words.len() > 100, "{f:?} {a:?}: SPIR-V too short");
        // OpCapability Float16 (9) is declared exactly by the f16 variants.
        let float16 = words.windows(2).any(|w| w[0] == (2 << 16 | 17) && w[1] == 9);
        assert_eq!(float16, a == Arith::F16, "{f:?} {a:?}: OpCapability Float16");
    }
}

#[test]
fn every_variant_translates_to_msl() {
    for (f, a) in family_variants() {
        let (m, info) = module(f, a);
        let options = msl::Options { lang_version: (2, 1), ..Default::default() };
        let pipeline = msl::PipelineOptions::default();
        let (src, _) = msl::write_string(&m, &info, &options, &pipeline).unwrap_or_else(|e| panic!("{f:?} {a:?}: {e}"));
        for &k in Kernel::ALL.iter().filter(|k| k.family() == f) {
            assert!(src.contains(&format!("kernel void {}", k.entry())), "{k:?} {a:?}: no MSL kernel function");
        }
        assert_eq!(src.contains("half4"), a == Arith::F16, "{f:?} {a:?}: MSL half4 arithmetic");
    }
}

/// Every kernel file in `src/shaders` is some family's body (so a new shader cannot miss the
/// checks above), and the pooling entry point is one of them.
#[test]
fn every_shader_file_is_a_family() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/shaders");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".wgsl") || name == "common.wgsl" || name.starts_with("arith_") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(Family::ALL.iter().any(|f| f.body() == text), "{name} is no family's body");
        files += 1;
    }
    assert_eq!(files, Family::ALL.len());
    assert_eq!(Kernel::Pool2d.family(), Family::Pool);
    assert_eq!(Kernel::Pool2d.entry(), "pool2d");
}

/// Every entry point's workgroup memory (the `var<workgroup>`s it or its callees use) fits
/// WebGPU's guaranteed `max_compute_workgroup_storage_size` of 16 384 bytes at both precisions:
/// the session asks for the adapter's own limits, so a desktop GPU or lavapipe would not notice a
/// kernel that a mobile one rejects. The attention core's f32 tiles are the largest user, and
/// kernels without a barrier use none.
#[test]
fn workgroup_memory_fits_webgpus_minimum() {
    const WEBGPU_MIN: u32 = 16_384;
    let mut attend = 0;
    for (f, a) in family_variants() {
        let (m, info) = module(f, a);
        for (i, ep) in m.entry_points.iter().enumerate() {
            let uses = info.get_entry_point(i);
            let bytes: u32 = m
                .global_variables
                .iter()
                .filter(|(h, g)| g.space == naga::AddressSpace::WorkGroup && !uses[*h].is_empty())
                .map(|(_, g)| m.types[g.ty].inner.size(m.to_ctx()))
                .sum();
            assert!(bytes <= WEBGPU_MIN, "{f:?} {a:?} {}: {bytes} bytes of workgroup memory", ep.name);
            // The table sessions choose kernels by (`Variant::workgroup_bytes`) agrees.
            let k = Kernel::ALL.iter().copied().find(|k| k.family() == f && k.entry() == ep.name).unwrap();
            assert_eq!(Variant::of(k, a).workgroup_bytes(), bytes, "{f:?} {a:?} {}", ep.name);
            if ep.name == "attend" && a == Arith::F32 {
                attend = bytes;
            }
            if ["layer_norm", "softmax", "reduce", "dense", "attend"].contains(&ep.name.as_str()) {
                assert_eq!(bytes == 0, ep.name != "attend", "{f:?} {a:?} {}: {bytes} bytes", ep.name);
            }
        }
    }
    assert!(attend > 12_000, "the attention core's f32 tiles: {attend} bytes");
}

/// Kernels read their parameter blocks by name only (the structs and constants generated from
/// the Rust table, `params.rs`): no family body, `common.wgsl` or prelude part reads a word by a
/// literal position, so the lowering and the shaders cannot disagree on one.
#[test]
fn parameters_are_read_by_name() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/shaders");
    let mut texts: Vec<(String, String)> =
        Family::ALL.iter().map(|f| (format!("{f:?}"), f.body().to_string())).collect();
    for name in [
        "common.wgsl",
        "prelude/dense.wgsl",
        "prelude/lane_sum.wgsl",
        "prelude/lane_sum_sg.wgsl",
        "prelude/window.wgsl",
    ] {
        texts.push((name.into(), std::fs::read_to_string(dir.join(name)).unwrap()));
    }
    for (name, text) in &texts {
        for read in ["pu(", "pf(", "wdesc(", "reg("] {
            for (at, _) in text.match_indices(read) {
                let next = text[at + read.len()..].chars().next().unwrap();
                assert!(!next.is_ascii_digit(), "{name}: `{read}` of a literal word at byte {at}");
            }
        }
    }
    // The generated part names every kernel's layout: each module declares the loaders its
    // entry points call.
    let src = Family::Linear.source(Arith::F32).unwrap();
    for decl in
        ["fn dense_p() -> DenseP", "fn dense_ln_p() -> DenseLnP", "fn dense_p_w(i: u32) -> Wd", "const DENSE_W: u32"]
    {
        assert!(src.contains(decl), "Linear: no `{decl}`");
    }
}
