//! Reading and writing NumPy `.npy` files (format version 1.0/2.0, little-endian, C order) for
//! `roofline run` inputs/outputs and onnxruntime reference comparisons.

use std::path::Path;

use super::{ExecError, RtData, RtTensor};

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
    let shape_text = &shape_text[1..shape_text.find(')').ok_or_else(|| bad(path, "bad shape"))?];
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad(path, format!("bad dim `{s}`"))))
        .collect::<Result<_, _>>()?;
    let count: usize = shape.iter().product();
    let data = &bytes[start + header_len..];
    let need = |width: usize| -> Result<(), ExecError> {
        if data.len() < count * width {
            Err(bad(
                path,
                format!("needs {} data bytes, has {}", count * width, data.len()),
            ))
        } else {
            Ok(())
        }
    };
    let data = match descr {
        "<f4" => {
            need(4)?;
            RtData::F32(
                data.chunks_exact(4)
                    .take(count)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            )
        }
        "<f8" => {
            need(8)?;
            RtData::F32(
                data.chunks_exact(8)
                    .take(count)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                    .collect(),
            )
        }
        "<i8" => {
            need(8)?;
            RtData::I64(
                data.chunks_exact(8)
                    .take(count)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect(),
            )
        }
        "<i4" => {
            need(4)?;
            RtData::I64(
                data.chunks_exact(4)
                    .take(count)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    .collect(),
            )
        }
        "|b1" | "|u1" => {
            need(1)?;
            RtData::I64(data.iter().take(count).map(|&b| b as i64).collect())
        }
        other => {
            return Err(bad(
                path,
                format!("unsupported dtype `{other}` (f4, f8, i4, i8, u1, b1)"),
            ))
        }
    };
    Ok(RtTensor { shape, data })
}

/// The bytes of a NumPy `.npy` file (format 1.0) holding `tensor`.
pub fn encode_npy(tensor: &RtTensor) -> Vec<u8> {
    let (descr, payload): (&str, Vec<u8>) = match &tensor.data {
        RtData::F32(v) => ("<f4", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        RtData::I64(v) => ("<i8", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
    };
    let shape = match tensor.shape.as_slice() {
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
