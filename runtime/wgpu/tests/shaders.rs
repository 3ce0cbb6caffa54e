//! Every WGSL family (the shared preamble plus its kernels), and so every entry point, parsed and
//! validated by naga and translated to SPIR-V (Vulkan, Android) and to MSL (Metal, Apple) —
//! no device needed, so Metal portability is checked on Linux. Kernels are specialised only
//! through their uniform parameter block (no pipeline constants), so one module per family
//! covers every variant.

use kestrel_wgpu::{Family, Kernel};
use naga::back::{msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn module(f: Family) -> (naga::Module, naga::valid::ModuleInfo) {
    let src = f.source();
    let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{f:?}: {}", e.emit_to_string(&src)));
    let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{f:?}: {}", e.emit_to_string(&src)));
    (module, info)
}

#[test]
fn every_kernel_is_an_entry_point_of_its_family() {
    for &k in Kernel::ALL {
        let (m, _) = module(k.family());
        assert!(
            m.entry_points.iter().any(|e| e.name == k.entry() && e.stage == naga::ShaderStage::Compute),
            "{k:?}: no compute entry point `{}` in {:?}",
            k.entry(),
            k.family()
        );
    }
    // And every entry point has a key.
    for &f in Family::ALL {
        let (m, _) = module(f);
        for e in &m.entry_points {
            assert!(
                Kernel::ALL.iter().any(|k| k.family() == f && k.entry() == e.name),
                "{f:?}: `{}` has no Kernel key",
                e.name
            );
        }
    }
}

#[test]
fn every_family_translates_to_spirv() {
    for &f in Family::ALL {
        let (m, info) = module(f);
        let words = spv::write_vec(&m, &info, &spv::Options::default(), None).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        assert_eq!(words[0], 0x0723_0203, "{f:?}: SPIR-V magic");
        assert!(words.len() > 100, "{f:?}: SPIR-V too short");
    }
}

#[test]
fn every_family_translates_to_msl() {
    for &f in Family::ALL {
        let (m, info) = module(f);
        let options = msl::Options { lang_version: (2, 1), ..Default::default() };
        let pipeline = msl::PipelineOptions::default();
        let (src, _) = msl::write_string(&m, &info, &options, &pipeline).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        for &k in Kernel::ALL.iter().filter(|k| k.family() == f) {
            assert!(src.contains(&format!("kernel void {}", k.entry())), "{k:?}: no MSL kernel function");
        }
    }
}
