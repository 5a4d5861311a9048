//! Errors of the analysis layer. Every variant names the file, node or input at fault, so the
//! CLI can print one line and exit with status 2.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    // The io error is part of the message, not a `source`: `{:#}` would print it twice.
    #[error("{}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: not a valid ONNX model: {reason}", path.display())]
    NotOnnx { path: PathBuf, reason: String },
    #[error("external data for tensor `{tensor}` ({}): {reason}", path.display())]
    ExternalData {
        tensor: String,
        path: PathBuf,
        reason: String,
    },
    #[error("invalid graph: {reason}")]
    InvalidGraph { reason: String },
    #[error("{what} has an absurd shape {shape} (element count overflows or exceeds 2^48)")]
    AbsurdShape { what: String, shape: String },
    #[error(
        "input `{input}` has unbound symbolic dim `{dim}` (shape {shape}); unbound: {all}; bind them with --dim NAME=VALUE, --input {input}=... or --batch N"
    )]
    UnboundDim {
        input: String,
        dim: String,
        shape: String,
        /// Every unbound dim with the inputs that use it.
        all: String,
    },
    #[error("--dim {spec}: {reason}")]
    BadDimSpec { spec: String, reason: String },
    #[error("--input {spec}: {reason}")]
    BadInputSpec { spec: String, reason: String },
    #[error("--batch {batch}: {reason}")]
    BadBatch { batch: u64, reason: String },
    #[error("node `{node}` ({op_type}): {reason}")]
    Node {
        node: String,
        op_type: String,
        reason: String,
    },
    #[error("unknown built-in model `{name}` (available: {available})")]
    UnknownBuiltin { name: String, available: String },
    #[error(
        "builtin:{name} has {:.1} GB of fp32 weights, more than the {:.1} GB this tool materialises to run or export; analyse it (weights stay symbolic) or run a small preset such as builtin:llama-tiny",
        *bytes as f64 / 1e9, *limit as f64 / 1e9
    )]
    TooLargeToMaterialise {
        name: String,
        bytes: u64,
        limit: u64,
    },
}
