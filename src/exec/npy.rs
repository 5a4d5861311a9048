//! Reading and writing NumPy `.npy` files (format version 1.0/2.0, little-endian, C order) for
//! `roofline run` inputs/outputs and onnxruntime reference comparisons.

use std::path::Path;

use super::{ExecError, RtData, RtTensor};
use crate::analysis::tensor::DType;

fn bad(path: &Path, reason: impl Into<String>) -> ExecError {
    ExecError::Npy {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub fn read_npy(path: &Path) -> Result<RtTensor, ExecError> {
    let bytes = std::fs::read(path).map_err(|e| bad(path, e.to_string()))?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad(path, "not a .npy file"));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(path, format!("unsupported .npy version {v}"))),
    };
    let header = std::str::from_utf8(
        bytes
            .get(start..start + header_len)
            .ok_or_else(|| bad(path, "truncated header"))?,
    )
    .map_err(|_| bad(path, "header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))?;
        let rest = &header[at + key.len() + 2..];
        let colon = rest.find(':')?;
        Some(rest[colon + 1..].trim_start())
    };
    let descr = field("descr").ok_or_else(|| bad(path, "no descr"))?;
    let descr = descr.trim_start_matches('\'');
    let descr = &descr[..descr.find('\'').unwrap_or(descr.len())];
    if field("fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(bad(path, "Fortran order is not supported"));
    }
    let shape_text = field("shape").ok_or_else(|| bad(path, "no shape"))?;
    let shape_text = shape_text
        .strip_prefix('(')
        .and_then(|rest| rest.find(')').map(|end| &rest[..end]))
        .ok_or_else(|| bad(path, "bad shape"))?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad(path, format!("bad dim `{s}`"))))
        .collect::<Result<_, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n as u64 <= crate::analysis::infer::MAX_ELEMENTS)
        .ok_or_else(|| bad(path, "absurd shape"))?;
    let data = &bytes[start + header_len..];
    let need = |width: usize| -> Result<(), ExecError> {
        if (data.len() as u64) < count as u64 * width as u64 {
            Err(bad(
                path,
                format!("needs {} data bytes, has {}", count * width, data.len()),
            ))
        } else {
            Ok(())
        }
    };
    // Integers of every width run as i64 and floats as f32 (the executor's two element
    // types); `encode_npy_as` writes outputs back in the model's own types.
    let (width, kind) = match descr {
        "<f4" => (4, 'f'),
        "<f8" => (8, 'f'),
        "<f2" => (2, 'f'),
        "<i8" => (8, 'i'),
        "<i4" => (4, 'i'),
        "<i2" => (2, 'i'),
        "|i1" => (1, 'i'),
        "<u8" => (8, 'u'),
        "<u4" => (4, 'u'),
        "<u2" => (2, 'u'),
        "|u1" | "|b1" => (1, 'u'),
        other => {
            return Err(bad(
                path,
                format!("unsupported dtype `{other}` (f2, f4, f8, i1-i8, u1-u8, b1)"),
            ))
        }
    };
    need(width)?;
    let words = data.chunks_exact(width).take(count);
    let data = match (kind, width) {
        ('f', 4) => RtData::F32(
            words
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        ('f', 8) => RtData::F32(
            words
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
        ),
        ('f', _) => RtData::F32(
            words
                .map(|c| crate::analysis::tensor::f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
        ),
        ('i', _) => RtData::I64(words.map(signed_le).collect()),
        _ => RtData::I64(
            words
                .map(|c| {
                    let mut word = [0u8; 8];
                    word[..c.len()].copy_from_slice(c);
                    // u64 values past i64::MAX wrap, as a cast to int64 would.
                    u64::from_le_bytes(word) as i64
                })
                .collect(),
        ),
    };
    Ok(RtTensor { shape, data })
}

/// A little-endian two's-complement integer of 1 to 8 bytes, sign-extended.
fn signed_le(bytes: &[u8]) -> i64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    let shift = 64 - 8 * bytes.len() as u32;
    (i64::from_le_bytes(word) << shift) >> shift
}

/// The bytes of a NumPy `.npy` file (format 1.0) holding `tensor` (f32 or i64).
pub fn encode_npy(tensor: &RtTensor) -> Vec<u8> {
    let (descr, payload): (&str, Vec<u8>) = match &tensor.data {
        RtData::F32(v) => ("<f4", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        RtData::I64(v) => ("<i8", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
    };
    with_header(descr, &tensor.shape, payload)
}

/// The bytes of a `.npy` file holding `tensor` as the element type `dtype` (the model's type
/// for that value): integers narrowed with wrap-around as a cast in that type would, bool as
/// 0/1, f64 and f16 from the f32 the executor computed. Types NumPy has no form of (bf16,
/// float8, strings) stay f32 or i64.
pub fn encode_npy_as(tensor: &RtTensor, dtype: DType) -> Vec<u8> {
    let ints = || -> Vec<i64> {
        match &tensor.data {
            RtData::I64(v) => v.clone(),
            RtData::F32(v) => v.iter().map(|&x| x as i64).collect(),
        }
    };
    let floats = || -> Vec<f32> {
        match &tensor.data {
            RtData::F32(v) => v.clone(),
            RtData::I64(v) => v.iter().map(|&x| x as f32).collect(),
        }
    };
    let (descr, payload): (&str, Vec<u8>) = match dtype {
        DType::F32 => (
            "<f4",
            floats().iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        DType::F64 => (
            "<f8",
            floats()
                .iter()
                .flat_map(|&x| f64::from(x).to_le_bytes())
                .collect(),
        ),
        DType::F16 => (
            "<f2",
            floats()
                .iter()
                .flat_map(|&x| super::lower::quant::f32_to_f16(x).to_le_bytes())
                .collect(),
        ),
        DType::Bool => ("|b1", ints().iter().map(|&x| u8::from(x != 0)).collect()),
        DType::I8 => ("|i1", ints().iter().map(|&x| x as i8 as u8).collect()),
        DType::U8 => ("|u1", ints().iter().map(|&x| x as u8).collect()),
        DType::I16 => (
            "<i2",
            ints()
                .iter()
                .flat_map(|&x| (x as i16).to_le_bytes())
                .collect(),
        ),
        DType::U16 => (
            "<u2",
            ints()
                .iter()
                .flat_map(|&x| (x as u16).to_le_bytes())
                .collect(),
        ),
        DType::I32 => (
            "<i4",
            ints()
                .iter()
                .flat_map(|&x| (x as i32).to_le_bytes())
                .collect(),
        ),
        DType::U32 => (
            "<u4",
            ints()
                .iter()
                .flat_map(|&x| (x as u32).to_le_bytes())
                .collect(),
        ),
        DType::I64 => ("<i8", ints().iter().flat_map(|x| x.to_le_bytes()).collect()),
        DType::U64 => (
            "<u8",
            ints()
                .iter()
                .flat_map(|&x| (x as u64).to_le_bytes())
                .collect(),
        ),
        DType::Bf16 | DType::F8 | DType::String | DType::Other => return encode_npy(tensor),
    };
    with_header(descr, &tensor.shape, payload)
}

fn with_header(descr: &str, shape: &[usize], payload: Vec<u8>) -> Vec<u8> {
    let shape = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so that data starts on a 64-byte boundary, header ends with a newline.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + payload.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Writes `tensor` as a `.npy` file, atomically.
pub fn write_npy(path: &Path, tensor: &RtTensor) -> Result<(), ExecError> {
    crate::fsio::write_atomic(path, &encode_npy(tensor)).map_err(|e| bad(path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = std::env::temp_dir().join(format!("npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.npy");
        let t = RtTensor {
            shape: vec![2, 3],
            data: RtData::F32((0..6).map(|v| v as f32).collect()),
        };
        write_npy(&path, &t).unwrap();
        let back = read_npy(&path).unwrap();
        assert_eq!(back.shape, t.shape);
        assert_eq!(back.data, t.data);
    }
}
