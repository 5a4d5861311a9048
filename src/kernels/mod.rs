//! CPU kernels: they take typed slices, shapes and parameters (conv geometry, epilogue,
//! precision) and write outputs. They know nothing about ONNX. Every family has a portable
//! version; ISA variants are picked at run time (`is_x86_feature_detected!`) once and cached.

pub mod conv;
/// The direct depthwise kernel, a child of `conv` (`kernels/conv/depthwise.rs`), at its old path.
pub use conv::depthwise;
pub mod compare;
pub mod elementwise;
pub mod gemm;
pub mod hugepage;
pub mod integer;
pub mod math;
pub mod movement;
pub mod norm;
pub mod parallel;
pub mod pool;
pub mod qgemm;
pub mod simd;
