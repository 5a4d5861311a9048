//! Devices: the `DeviceProfile` every other layer reads (the format `roofline probe` writes and
//! `--device FILE.json` loads), numeric precisions, and the built-in catalogue of real hardware.

pub mod calibration;
pub mod catalog;
mod catalog_data;
pub mod probe_record;
pub mod profile;

pub use catalog::{catalog, find_device};
pub use profile::{
    probed_name, ComputeCeiling, DeviceKind, DeviceProfile, MemoryCeiling, MemoryLevel,
    ProfileSource, PROFILE_SCHEMA_VERSION,
};

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Arithmetic precision of a compute ceiling, and the storage width of float tensors when a
/// model is analysed "at" that precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp64,
    Fp32,
    Tf32,
    Fp16,
    Bf16,
    Fp8,
    Int8,
}

impl Precision {
    pub const ALL: [Precision; 7] = [
        Precision::Fp64,
        Precision::Fp32,
        Precision::Tf32,
        Precision::Fp16,
        Precision::Bf16,
        Precision::Fp8,
        Precision::Int8,
    ];

    /// Bytes of one stored float element at this precision (TF32 is stored as FP32).
    pub fn bytes_per_element(self) -> u64 {
        match self {
            Precision::Fp64 => 8,
            Precision::Fp32 | Precision::Tf32 => 4,
            Precision::Fp16 | Precision::Bf16 => 2,
            Precision::Fp8 | Precision::Int8 => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp64 => "fp64",
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
            Precision::Int8 => "int8",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Precision::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                format!("unknown precision `{text}` (expected fp64, fp32, tf32, fp16, bf16, fp8 or int8)")
            })
    }
}
