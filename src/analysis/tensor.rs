//! Tensor facts: what the analysis knows about every value in the graph (element type, shape
//! with known or symbolic dims, and, for constants, the value itself).
//!
//! Constant payloads stay borrowed from the memory-mapped model (`TensorData::Raw`) until an op
//! needs to read them, and `ConstantOfShape` results stay a single repeated value
//! (`TensorData::Splat`), so folding the weight generators of a 500 MB model costs no memory.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// ONNX element types (`TensorProto.DataType`), by their spec numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    String,
    Bool,
    F16,
    F64,
    U32,
    U64,
    Bf16,
    /// Any 8-bit float flavour (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ).
    F8,
    /// Types the tool never computes with (complex, 4-bit); carried for byte accounting.
    Other,
}

impl DType {
    pub fn from_onnx(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            8 => DType::String,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            16 => DType::Bf16,
            17..=20 | 24 => DType::F8,
            14 | 15 | 21..=23 | 25..=28 => DType::Other,
            _ => return None,
        })
    }

    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::String => 8,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::Bf16 => 16,
            DType::F8 => 17,
            DType::Other => 0,
        }
    }

    /// Storage size of one element; strings are counted as 8 bytes (a pointer-sized handle).
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::U8 | DType::I8 | DType::Bool | DType::F8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::String | DType::Other => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F32 | DType::F16 | DType::F64 | DType::Bf16 | DType::F8
        )
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        f.write_str(&name)
    }
}

/// One dimension: a number, or a name still to be bound (`batch`, `seq_len`, `unk__123`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    Known(u64),
    Sym(String),
}

impl Dim {
    pub fn known(&self) -> Option<u64> {
        match self {
            Dim::Known(value) => Some(*value),
            Dim::Sym(_) => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(value) => write!(f, "{value}"),
            Dim::Sym(name) => f.write_str(name),
        }
    }
}

/// Formats a shape the way users type it on the command line: `1x3x224x224`.
pub fn shape_to_string(shape: &[Dim]) -> String {
    if shape.is_empty() {
        return "scalar".to_string();
    }
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// Payload of a constant tensor.
#[derive(Clone, Debug)]
pub enum TensorData {
    /// Little-endian bytes as stored in the model, borrowed from the memory map.
    Raw(Bytes),
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
    /// Every element has this value (the result of `ConstantOfShape`, or a broadcast scalar).
    Splat(f64),
    /// Strings are carried only so that their count is right.
    Strings(usize),
    /// A constant the tool did not evaluate (e.g. a transposed weight): known to be fixed at
    /// run time, so costed as a weight, but its values are not available.
    Opaque,
}

/// A constant tensor value.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub data: TensorData,
}

/// Largest element count the folder will materialise into a dense vector. Shape-computing
/// subgraphs are tiny; weights are never expanded (they stay `Raw` or `Splat`).
pub const MAX_MATERIALISED_ELEMENTS: u64 = 1 << 22;

impl Tensor {
    pub fn element_count(&self) -> u64 {
        self.shape.iter().product()
    }

    pub fn from_i64(shape: Vec<u64>, values: Vec<i64>) -> Tensor {
        Tensor {
            dtype: DType::I64,
            shape,
            data: TensorData::I64(values),
        }
    }

    pub fn from_f32(shape: Vec<u64>, values: Vec<f32>) -> Tensor {
        Tensor {
            dtype: DType::F32,
            shape,
            data: TensorData::F32(values),
        }
    }

    pub fn scalar_i64(value: i64) -> Tensor {
        Tensor::from_i64(vec![], vec![value])
    }

    /// Values as f64 (exact for every integer a shape can hold). `None` when the payload is
    /// too large to expand or has a type with no numeric meaning here.
    pub fn to_f64_vec(&self) -> Option<Cow<'_, [f64]>> {
        let count = self.element_count();
        match &self.data {
            TensorData::F64(values) => Some(Cow::Borrowed(values)),
            TensorData::F32(values) => Some(Cow::Owned(values.iter().map(|&v| v as f64).collect())),
            TensorData::I64(values) => Some(Cow::Owned(values.iter().map(|&v| v as f64).collect())),
            TensorData::Splat(value) => {
                if count > MAX_MATERIALISED_ELEMENTS {
                    return None;
                }
                Some(Cow::Owned(vec![*value; count as usize]))
            }
            TensorData::Strings(_) | TensorData::Opaque => None,
            TensorData::Raw(bytes) => {
                if count > MAX_MATERIALISED_ELEMENTS {
                    return None;
                }
                decode_raw(self.dtype, bytes, count as usize).map(Cow::Owned)
            }
        }
    }

    /// Values as i64 (float values are truncated toward zero, as Cast does).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        if let TensorData::I64(values) = &self.data {
            return Some(values.clone());
        }
        let values = self.to_f64_vec()?;
        Some(values.iter().map(|&v| v as i64).collect())
    }

    /// Values as f32, for kernels and weight rewrites.
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        if let TensorData::F32(values) = &self.data {
            return Some(values.clone());
        }
        let count = self.element_count();
        if let TensorData::Raw(bytes) = &self.data {
            if self.dtype == DType::F32 && bytes.len() as u64 == count * 4 {
                return Some(
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                );
            }
        }
        let values = self.to_f64_vec()?;
        Some(values.iter().map(|&v| v as f32).collect())
    }

    /// Every value as i64 (floats truncated), however large the tensor: for the executor,
    /// which must run an integer weight of any size (an 8-million-element uint8 matrix of a
    /// dynamically quantized model), where analysis stops at `MAX_MATERIALISED_ELEMENTS`.
    pub fn all_i64(&self) -> Option<Vec<i64>> {
        match &self.data {
            TensorData::Raw(bytes) => {
                let values = decode_raw(self.dtype, bytes, self.element_count() as usize)?;
                Some(values.iter().map(|&v| v as i64).collect())
            }
            _ => self.to_i64_vec(),
        }
    }

    /// Every value as f32, however large the tensor (an fp16 or bf16 weight past
    /// `MAX_MATERIALISED_ELEMENTS`): for the executor, as [`Tensor::all_i64`].
    pub fn all_f32(&self) -> Option<Vec<f32>> {
        match &self.data {
            TensorData::Raw(bytes) if self.dtype != DType::F32 => {
                let values = decode_raw(self.dtype, bytes, self.element_count() as usize)?;
                Some(values.iter().map(|&v| v as f32).collect())
            }
            _ => self.to_f32_vec(),
        }
    }

    /// Bytes this tensor occupies in its own element type.
    pub fn size_bytes(&self) -> u64 {
        self.element_count() * self.dtype.size_bytes()
    }
}

fn decode_raw(dtype: DType, bytes: &[u8], count: usize) -> Option<Vec<f64>> {
    let width = dtype.size_bytes() as usize;
    if dtype == DType::String || dtype == DType::Other || bytes.len() < count * width {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    for chunk in bytes.chunks_exact(width).take(count) {
        let value = match dtype {
            DType::F32 => f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) as f64,
            DType::F64 => f64::from_le_bytes(chunk.try_into().ok()?),
            DType::I64 => i64::from_le_bytes(chunk.try_into().ok()?) as f64,
            DType::U64 => u64::from_le_bytes(chunk.try_into().ok()?) as f64,
            DType::I32 => i32::from_le_bytes(chunk.try_into().ok()?) as f64,
            DType::U32 => u32::from_le_bytes(chunk.try_into().ok()?) as f64,
            DType::I16 => i16::from_le_bytes([chunk[0], chunk[1]]) as f64,
            DType::U16 => u16::from_le_bytes([chunk[0], chunk[1]]) as f64,
            DType::I8 => chunk[0] as i8 as f64,
            DType::U8 | DType::Bool => chunk[0] as f64,
            DType::F16 => f16_to_f32(u16::from_le_bytes([chunk[0], chunk[1]])) as f64,
            DType::Bf16 => {
                f32::from_bits((u16::from_le_bytes([chunk[0], chunk[1]]) as u32) << 16) as f64
            }
            DType::F8 | DType::String | DType::Other => return None,
        };
        out.push(value);
    }
    Some(out)
}

/// IEEE 754 binary16 to binary32.
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits >> 15) & 1) as u32;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let mantissa = (bits & 0x3ff) as u32;
    let out = if exponent == 0 {
        if mantissa == 0 {
            sign << 31
        } else {
            // Subnormal: value = mantissa * 2^-24.
            let value = mantissa as f32 * f32::powi(2.0, -24);
            return if sign == 1 { -value } else { value };
        }
    } else if exponent == 0x1f {
        (sign << 31) | 0x7f80_0000 | (mantissa << 13)
    } else {
        (sign << 31) | ((exponent + 112) << 23) | (mantissa << 13)
    };
    f32::from_bits(out)
}

/// What the analysis knows about one value.
#[derive(Clone, Debug)]
pub struct TensorFact {
    pub dtype: DType,
    /// `None` when even the rank is unknown.
    pub shape: Option<Vec<Dim>>,
    pub konst: Option<Arc<Tensor>>,
}

impl TensorFact {
    pub fn new(dtype: DType, shape: Vec<Dim>) -> TensorFact {
        TensorFact {
            dtype,
            shape: Some(shape),
            konst: None,
        }
    }

    pub fn known(dtype: DType, shape: &[u64]) -> TensorFact {
        TensorFact::new(dtype, shape.iter().map(|&d| Dim::Known(d)).collect())
    }

    pub fn unknown(dtype: DType) -> TensorFact {
        TensorFact {
            dtype,
            shape: None,
            konst: None,
        }
    }

    pub fn constant(tensor: Tensor) -> TensorFact {
        TensorFact {
            dtype: tensor.dtype,
            shape: Some(tensor.shape.iter().map(|&d| Dim::Known(d)).collect()),
            konst: Some(Arc::new(tensor)),
        }
    }

    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(Vec::len)
    }

    /// All dims as numbers, if every one is known.
    pub fn concrete_shape(&self) -> Option<Vec<u64>> {
        self.shape.as_ref()?.iter().map(Dim::known).collect()
    }

    /// Element count when the shape is fully known (saturating: absurd shapes are rejected
    /// earlier by inference).
    pub fn element_count(&self) -> Option<u64> {
        self.concrete_shape()
            .map(|dims| dims.iter().fold(1u64, |acc, &d| acc.saturating_mul(d)))
    }

    pub fn is_constant(&self) -> bool {
        self.konst.is_some()
    }

    pub fn shape_string(&self) -> String {
        match &self.shape {
            Some(shape) => shape_to_string(shape),
            None => "?".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_matches_known_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), f32::powi(2.0, -24));
    }

    #[test]
    fn raw_tensor_decodes_lazily() {
        let bytes: Vec<u8> = [1i64, -2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let tensor = Tensor {
            dtype: DType::I64,
            shape: vec![3],
            data: TensorData::Raw(Bytes::from(bytes)),
        };
        assert_eq!(tensor.to_i64_vec(), Some(vec![1, -2, 3]));
    }

    #[test]
    fn large_weights_decode_for_the_executor_only() {
        // A uint8 weight one element past the analysis cap (ddddocr's 1024×8210 matrix is
        // twice that): analysis declines it, the executor's decode takes it whole.
        let count = MAX_MATERIALISED_ELEMENTS as usize + 1;
        let bytes: Vec<u8> = (0..count).map(|i| (i % 251) as u8).collect();
        let weight = Tensor {
            dtype: DType::U8,
            shape: vec![count as u64],
            data: TensorData::Raw(Bytes::from(bytes)),
        };
        assert!(weight.to_i64_vec().is_none());
        let all = weight.all_i64().unwrap();
        assert_eq!(all.len(), count);
        assert_eq!(all[count - 1], ((count - 1) % 251) as i64);
        let half: Vec<u8> = (0..count).flat_map(|_| 0x3c00u16.to_le_bytes()).collect();
        let fp16 = Tensor {
            dtype: DType::F16,
            shape: vec![count as u64],
            data: TensorData::Raw(Bytes::from(half)),
        };
        assert!(fp16.to_f32_vec().is_none());
        assert_eq!(
            fp16.all_f32().map(|v| (v.len(), v[count - 1])),
            Some((count, 1.0))
        );
    }

    #[test]
    fn splat_does_not_expand_huge_tensors() {
        let tensor = Tensor {
            dtype: DType::F32,
            shape: vec![4096, 4096, 64],
            data: TensorData::Splat(0.5),
        };
        assert!(tensor.to_f64_vec().is_none());
        assert_eq!(tensor.size_bytes(), 4096 * 4096 * 64 * 4);
    }
}
