//! Checks an ONNX file's tensors before tract sees them.
//!
//! tract's importer trusts the protobuf: a tensor whose data is shorter than its declared
//! dims panics inside it (`copy_from_slice`), an unknown element type panics (`unwrap`), a
//! negative dim becomes a huge size. Every initializer, `Constant` value and tensor attribute
//! (subgraphs included) is checked here first: known element type, non-negative dims whose
//! element and byte counts do not overflow, and data of exactly that size, in `raw_data`, the
//! typed field tract reads for that type, or an external file.

use crate::error::ConvertError;
use std::path::Path;
use tract_onnx::pb::{GraphProto, ModelProto, TensorProto};

/// ONNX element types tract reads, with their size in bytes (`None`: strings).
fn element(data_type: i32) -> Result<(&'static str, Option<u64>), String> {
    Ok(match data_type {
        1 => ("FLOAT", Some(4)),
        2 => ("UINT8", Some(1)),
        3 => ("INT8", Some(1)),
        4 => ("UINT16", Some(2)),
        5 => ("INT16", Some(2)),
        6 => ("INT32", Some(4)),
        7 => ("INT64", Some(8)),
        8 => ("STRING", None),
        9 => ("BOOL", Some(1)),
        10 => ("FLOAT16", Some(2)),
        11 => ("DOUBLE", Some(8)),
        12 => ("UINT32", Some(4)),
        13 => ("UINT64", Some(8)),
        14 => return Err("element type COMPLEX64 is not supported".into()),
        15 => return Err("element type COMPLEX128 is not supported".into()),
        16 => return Err("element type BFLOAT16 is not supported (export the model in float32 or float16)".into()),
        17..=20 => return Err("8-bit float element types are not supported".into()),
        21 | 22 => return Err("4-bit integer element types are not supported".into()),
        0 => return Err("no element type (UNDEFINED)".into()),
        other => return Err(format!("unknown element type {other}")),
    })
}

/// One tensor's problem, or `Ok`.
fn check_tensor(t: &TensorProto, dir: Option<&Path>) -> Result<(), String> {
    let (ty, size) = element(t.data_type)?;
    let mut numel: u64 = 1;
    for &d in &t.dims {
        let d = u64::try_from(d).map_err(|_| format!("dims {:?}: a negative dimension", t.dims))?;
        numel = numel.checked_mul(d).ok_or_else(|| format!("dims {:?}: the element count overflows", t.dims))?;
    }
    if numel > isize::MAX as u64 {
        return Err(format!("dims {:?}: {numel} elements", t.dims));
    }
    let external = t.data_location == Some(1);
    let holds = |n: usize, what: &str| {
        if n as u64 == numel {
            Ok(())
        } else {
            Err(format!("dims {:?} declare {numel} {ty} element(s), {what} holds {n} (truncated or corrupt)", t.dims))
        }
    };
    if !t.raw_data.is_empty() {
        let size = size.ok_or("STRING data in raw_data")?;
        let want = numel.checked_mul(size).ok_or_else(|| format!("dims {:?}: the byte count overflows", t.dims))?;
        if t.raw_data.len() as u64 != want {
            return Err(format!(
                "dims {:?} of {ty} need {want} bytes, raw_data holds {} (truncated or corrupt)",
                t.dims,
                t.raw_data.len()
            ));
        }
        return Ok(());
    }
    if external {
        return check_external(t, ty, size, numel, dir);
    }
    // The typed field tract reads for each element type.
    match t.data_type {
        1 => holds(t.float_data.len(), "float_data"),
        7 | 13 => holds(t.int64_data.len(), "int64_data"),
        11 => holds(t.double_data.len(), "double_data"),
        8 => holds(t.string_data.len(), "string_data"),
        _ => holds(t.int32_data.len(), "int32_data"),
    }
}

fn check_external(t: &TensorProto, ty: &str, size: Option<u64>, numel: u64, dir: Option<&Path>) -> Result<(), String> {
    let size = size.ok_or("STRING data in an external file")?;
    let get = |k: &str| t.external_data.iter().find(|e| e.key == k).map(|e| e.value.as_str());
    let location = get("location").ok_or("external data without a location")?;
    let number = |k: &str| -> Result<Option<u64>, String> {
        get(k).map(|v| v.parse::<u64>().map_err(|_| format!("external data {k} {v:?} is not a number"))).transpose()
    };
    let offset = number("offset")?.unwrap_or(0);
    let want = numel.checked_mul(size).ok_or("the byte count overflows")?;
    if let Some(length) = number("length")? {
        if length != want {
            return Err(format!("dims {:?} of {ty} need {want} bytes, the external data declares {length}", t.dims));
        }
    }
    let dir = dir.ok_or("external data, but the model's folder is unknown")?;
    let path = dir.join(location);
    let len = std::fs::metadata(&path).map_err(|e| format!("external data file {}: {e}", path.display()))?.len();
    if offset.checked_add(want).is_none_or(|end| end > len) {
        return Err(format!(
            "dims {:?} of {ty} need {want} bytes at offset {offset} of {}, which has {len} (truncated or corrupt)",
            t.dims,
            path.display()
        ));
    }
    Ok(())
}

/// Nodes (`name (OpType)`) that read the value called `name` in `g`.
fn consumers(g: &GraphProto, name: &str) -> Vec<String> {
    g.node
        .iter()
        .filter(|n| n.input.iter().any(|i| i == name))
        .map(|n| format!("`{}` ({})", n.name, n.op_type))
        .collect()
}

fn check_graph(g: &GraphProto, dir: Option<&Path>, errors: &mut Vec<String>) {
    for t in &g.initializer {
        if let Err(problem) = check_tensor(t, dir) {
            let readers = consumers(g, &t.name);
            let by = if readers.is_empty() { String::new() } else { format!(", read by {}", readers.join(", ")) };
            errors.push(format!("initializer `{}`{by}: {problem}", t.name));
        }
    }
    for n in &g.node {
        for a in &n.attribute {
            let tensors = a.t.iter().chain(&a.tensors);
            for t in tensors {
                if let Err(problem) = check_tensor(t, dir) {
                    errors.push(format!("node `{}` ({}), attribute `{}`: {problem}", n.name, n.op_type, a.name));
                }
            }
            for sub in a.g.iter().chain(&a.graphs) {
                check_graph(sub, dir, errors);
            }
        }
    }
}

/// Every tensor of the model, checked; all problems in one error.
pub(crate) fn check_model(proto: &ModelProto, path: &Path) -> Result<(), ConvertError> {
    let mut errors = Vec::new();
    if let Some(g) = &proto.graph {
        check_graph(g, path.parent(), &mut errors);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConvertError::BadTensors { path: path.display().to_string(), problems: errors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tract_onnx::pb::StringStringEntryProto;

    fn tensor(data_type: i32, dims: &[i64]) -> TensorProto {
        TensorProto { name: "t".into(), data_type, dims: dims.to_vec(), ..Default::default() }
    }

    #[test]
    fn data_must_match_the_declared_dims_in_every_storage() {
        let mut t = tensor(1, &[2, 3]);
        t.raw_data = vec![0; 24];
        assert_eq!(check_tensor(&t, None), Ok(()));
        t.raw_data.truncate(20);
        assert!(check_tensor(&t, None).unwrap_err().contains("raw_data holds 20"));
        t.raw_data.clear();
        t.float_data = vec![0.0; 5];
        assert!(check_tensor(&t, None).unwrap_err().contains("float_data holds 5"));
        t.float_data.push(1.0);
        assert_eq!(check_tensor(&t, None), Ok(()));
        let mut i = tensor(7, &[4]);
        i.int64_data = vec![1, 2, 3];
        assert!(check_tensor(&i, None).unwrap_err().contains("int64_data holds 3"));
        let mut h = tensor(10, &[2]);
        h.int32_data = vec![0x3c00, 0x4000];
        assert_eq!(check_tensor(&h, None), Ok(()));
        // No data at all for a non-empty tensor; an empty tensor needs none.
        assert!(check_tensor(&tensor(1, &[3]), None).is_err());
        assert_eq!(check_tensor(&tensor(1, &[0, 5]), None), Ok(()));
    }

    #[test]
    fn types_and_dims_tract_cannot_read_are_named() {
        assert!(check_tensor(&tensor(16, &[1]), None).unwrap_err().contains("BFLOAT16"));
        assert!(check_tensor(&tensor(99, &[1]), None).unwrap_err().contains("unknown element type 99"));
        assert!(check_tensor(&tensor(1, &[-1, 4]), None).unwrap_err().contains("negative"));
        assert!(check_tensor(&tensor(1, &[1 << 40, 1 << 40]), None).unwrap_err().contains("overflows"));
    }

    #[test]
    fn external_data_must_exist_and_be_long_enough() {
        let dir = std::env::temp_dir().join(format!("kestrel-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("w.bin"), [0u8; 40]).unwrap();
        let entry = |k: &str, v: &str| StringStringEntryProto { key: k.into(), value: v.into() };
        let mut t = tensor(1, &[8]);
        t.data_location = Some(1);
        t.external_data = vec![entry("location", "w.bin"), entry("offset", "8")];
        assert_eq!(check_tensor(&t, Some(&dir)), Ok(()));
        t.external_data[1] = entry("offset", "16");
        assert!(check_tensor(&t, Some(&dir)).unwrap_err().contains("which has 40"));
        t.external_data[1] = entry("offset", "lots");
        assert!(check_tensor(&t, Some(&dir)).unwrap_err().contains("not a number"));
        t.external_data = vec![entry("location", "missing.bin")];
        assert!(check_tensor(&t, Some(&dir)).unwrap_err().contains("missing.bin"));
        t.external_data = vec![entry("location", "w.bin"), entry("length", "12")];
        assert!(check_tensor(&t, Some(&dir)).unwrap_err().contains("declares 12"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
