//! Matrix products: ONNX `Gemm` (transposes, alpha, beta, a broadcast C) and `MatMul` (numpy
//! batch broadcasting, 1-D operands), the tool's `FusedGemm` / `FusedMatMul` (bias and
//! activation in the epilogue). All lower to one batched GEMM description; on the CPU the
//! blocking per shape comes from the tuning cache.

use std::sync::Arc;

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::ops::GemmConfig;
use crate::exec::cpu::{GemmConfigFn, Io, Prepared};
use crate::exec::{ExecError, RtData, RtTensor};
use crate::kernels::gemm::{self, Activation, BiasKind, Epilogue, MatRef};
use crate::kernels::parallel::{parallel_for, SendPtr};

/// Batched matmul: A [batch, m, k] (strides), B [batch, k, n], C = A·B (+ bias per column).
#[derive(Clone, Debug)]
pub(crate) struct MatMulSpec {
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    /// Offsets of each batch's A and B (broadcast batches repeat offsets).
    a_offsets: Vec<usize>,
    b_offsets: Vec<usize>,
    a_row_stride: usize,
    a_col_stride: usize,
    b_row_stride: usize,
    b_col_stride: usize,
    alpha: f32,
    /// Gemm's C: per-column bias, per-row bias, or a full [m, n] tensor (input position 2).
    c: GemmC,
    beta: f32,
    activation: Activation,
    /// B when it is a constant that the CPU packs once at plan time instead of on every run
    /// (one product, more than the few rows that stream B unpacked, at most
    /// `MAX_PREPACKED_B_BYTES` unless the rows are few, and while the plan's budget for packed copies lasts, see
    /// `exec::plan`): a batch-8 classifier head over 1000×2048 transposed weights spent two
    /// thirds of its time packing them. The plan's own constant, shared (never copied).
    constant_b: Option<Arc<RtTensor>>,
}

/// See [`MatMulSpec::constant_b_key`].
pub(crate) type PackedBKey = (usize, usize, [usize; 5]);

/// Largest constant B packed ahead of time (the packed copy adds its size to the plan's
/// memory): dense layers of CNN heads and BERT-size transformers pack, a 7B decoder's
/// 4096×11008 projections (180 MB) keep packing per call, which at prefill's many rows is a
/// small share of the product.
const MAX_PREPACKED_B_BYTES: usize = 32 << 20;

/// Rows under which a constant B over `MAX_PREPACKED_B_BYTES` is packed ahead of time all the
/// same (within the plan's budget for packed copies): packing reads and writes B, about
/// 4·peak ÷ (bandwidth · rows) of the product's time (half of it at 32 rows on a 120 GFLOP/s
/// core streaming 30 GB/s; a CRNN's 32×1024 · 1024×8210 classifier, 33.6 MB of weights, ran
/// 9.2 ms against a 4.6 ms bound), under a tenth from this many rows on.
const FEW_ROWS_FOR_LARGE_B: usize = 256;

#[derive(Clone, Debug, PartialEq)]
enum GemmC {
    None,
    PerCol,
    PerRow,
    Full,
    Scalar,
}

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    match (domain, op) {
        (Domain::Onnx, "Gemm") | (Domain::Tool, "FusedGemm") => Lowering::floats(lower_gemm),
        (Domain::Onnx, "MatMul") | (Domain::Tool, "FusedMatMul") => Lowering::floats(lower_matmul),
        _ => None,
    }
}

fn lower_gemm(cx: &Cx) -> Result<Lowered, ExecError> {
    let attrs = cx.attrs();
    let a = cx.shape_of(0)?;
    let b = cx.shape_of(1)?;
    let GemmConfig {
        trans_a,
        trans_b,
        alpha,
        beta,
    } = GemmConfig::from_attrs(attrs);
    let (m, k) = if trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
    let n = if trans_b { b[0] } else { b[1] };
    let c = match cx.input(2) {
        None => GemmC::None,
        Some(_) => {
            let cs = cx.shape_of(2)?;
            let count: usize = cs.iter().product();
            if count == 1 {
                GemmC::Scalar
            } else if count == m * n && m > 1 || (count == n && m == 1) {
                if count == n {
                    GemmC::PerCol
                } else {
                    GemmC::Full
                }
            } else if count == n {
                GemmC::PerCol
            } else if count == m {
                GemmC::PerRow
            } else {
                return Err(cx.error(format!(
                    "C of shape {cs:?} does not broadcast to [{m}, {n}]"
                )));
            }
        }
    };
    let spec = MatMulSpec {
        batch: 1,
        m,
        k,
        n,
        a_offsets: vec![0],
        b_offsets: vec![0],
        a_row_stride: if trans_a { 1 } else { a[1] },
        a_col_stride: if trans_a { a[1] } else { 1 },
        b_row_stride: if trans_b { 1 } else { b[1] },
        b_col_stride: if trans_b { b[1] } else { 1 },
        alpha,
        c,
        beta,
        activation: cx.activation()?,
        constant_b: None,
    };
    let spec = with_constant_b(cx, spec);
    Ok(Lowered::new(Kernel::MatMul(spec)).with_flops(2 * (m * n * k) as u64))
}

/// An operand's logical dims and the element stride of each: contiguous, or a Transpose the
/// plan folded into this read (`Cx::view`).
fn operand_layout(cx: &Cx, i: usize) -> Result<(Vec<usize>, Vec<usize>), ExecError> {
    let stored = cx.shape_of(i)?;
    let mut contiguous = vec![1usize; stored.len()];
    for axis in (0..stored.len().saturating_sub(1)).rev() {
        contiguous[axis] = contiguous[axis + 1] * stored[axis + 1];
    }
    Ok(match cx.view(i) {
        Some(perm) => (
            perm.iter().map(|&p| stored[p]).collect(),
            perm.iter().map(|&p| contiguous[p]).collect(),
        ),
        None => (stored, contiguous),
    })
}

fn lower_matmul(cx: &Cx) -> Result<Lowered, ExecError> {
    let (a, a_strides) = operand_layout(cx, 0)?;
    let (b, b_strides) = operand_layout(cx, 1)?;
    // A 1-D A is one row; a 1-D B one column.
    let (a2, a_str) = if a.len() == 1 {
        (vec![1, a[0]], vec![a[0], a_strides[0]])
    } else {
        (a.clone(), a_strides.clone())
    };
    let (b2, b_str) = if b.len() == 1 {
        (vec![b[0], 1], vec![b_strides[0], 1])
    } else {
        (b.clone(), b_strides.clone())
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let n = b2[b2.len() - 1];
    let a_batch = &a2[..a2.len() - 2];
    let b_batch = &b2[..b2.len() - 2];
    let rank = a_batch.len().max(b_batch.len());
    let out_batch: Vec<usize> = (0..rank)
        .map(|i| {
            let da = if i + a_batch.len() >= rank {
                a_batch[i + a_batch.len() - rank]
            } else {
                1
            };
            let db = if i + b_batch.len() >= rank {
                b_batch[i + b_batch.len() - rank]
            } else {
                1
            };
            da.max(db)
        })
        .collect();
    let batch: usize = out_batch.iter().product();
    // Element offset of each output batch's matrix in an operand (broadcast axes stride 0).
    let offsets = |own: &[usize], own_strides: &[usize]| -> Vec<usize> {
        let pad = rank - own.len();
        (0..batch)
            .map(|linear| {
                let mut rest = linear;
                let mut off = 0;
                for axis in (0..rank).rev() {
                    let coord = rest % out_batch[axis];
                    rest /= out_batch[axis];
                    if axis >= pad && own[axis - pad] != 1 {
                        off += coord * own_strides[axis - pad];
                    }
                }
                off
            })
            .collect()
    };
    let a_contiguous = cx.view(0).is_none();
    // A constant 2-D B with a batched, contiguous A: fold the batch into M (one big GEMM).
    let (batch, m, a_offsets, b_offsets) = if b.len() == 2
        && batch > 1
        && a_contiguous
        && a_batch.iter().product::<usize>() == batch
    {
        (1, m * batch, vec![0], vec![0])
    } else {
        (
            batch,
            m,
            offsets(a_batch, &a_str[..a_batch.len()]),
            offsets(b_batch, &b_str[..b_batch.len()]),
        )
    };
    let spec = MatMulSpec {
        batch,
        m,
        k,
        n,
        a_offsets,
        b_offsets,
        a_row_stride: a_str[a_str.len() - 2],
        a_col_stride: a_str[a_str.len() - 1],
        b_row_stride: b_str[b_str.len() - 2],
        b_col_stride: b_str[b_str.len() - 1],
        // Scalar multiplications folded into the reads (scaled attention's √scale on Q and K).
        alpha: cx.scale(0) * cx.scale(1),
        c: if cx.op() == "FusedMatMul" && cx.input(2).is_some() {
            GemmC::PerCol
        } else {
            GemmC::None
        },
        beta: 1.0,
        activation: cx.activation()?,
        constant_b: None,
    };
    let spec = with_constant_b(cx, spec);
    Ok(Lowered::new(Kernel::MatMul(spec)).with_flops(2 * (batch * m * n * k) as u64))
}

impl MatMulSpec {
    /// Lets go of a constant B once the CPU has packed it (`prepare`), or when it is not to be
    /// packed: the run reads only the packed copy.
    pub(crate) fn release_constant_b(&mut self) {
        self.constant_b = None;
    }

    /// Bytes the packed copy of a constant B will take (0 when B is not packed ahead).
    pub(crate) fn constant_b_bytes(&self) -> usize {
        self.constant_b_data().map_or(0, |b| b.len() * 4)
    }

    /// What a packed copy of the constant B depends on: the constant itself (its plan-wide
    /// allocation: values shared through Identity or a repeated layer are one), the view
    /// taken of it and the product's shape (which chooses the blocking).
    pub(crate) fn constant_b_key(&self) -> Option<PackedBKey> {
        let b = self.constant_b.as_ref()?;
        Some((
            Arc::as_ptr(b) as usize,
            self.b_offsets.first().copied().unwrap_or(0),
            [self.m, self.n, self.k, self.b_row_stride, self.b_col_stride],
        ))
    }

    fn constant_b_data(&self) -> Option<&[f32]> {
        match &self.constant_b.as_deref()?.data {
            RtData::F32(data) => Some(data),
            RtData::I64(_) => None,
        }
    }
}

/// Whether a product of `batch` matrices of `m` rows by a constant `k × n` B packs B at plan
/// time (the plan's budget for packed copies aside).
fn prepacks_b(batch: usize, m: usize, k: usize, n: usize) -> bool {
    batch == 1
        && gemm::reads_b_packed(m)
        && (k.saturating_mul(n).saturating_mul(4) <= MAX_PREPACKED_B_BYTES
            || m < FEW_ROWS_FOR_LARGE_B)
}

/// `spec` with its B kept for packing at plan time when B is a constant worth it.
fn with_constant_b(cx: &Cx, spec: MatMulSpec) -> MatMulSpec {
    let packs = prepacks_b(spec.batch, spec.m, spec.k, spec.n);
    MatMulSpec {
        constant_b: if packs { cx.const_f32_tensor(1) } else { None },
        ..spec
    }
}

/// The CPU blocking for the GEMM's shape, and a constant B packed for it.
pub(crate) fn prepare(spec: &MatMulSpec, gemm_config: &mut GemmConfigFn) -> Prepared {
    let config = gemm_config(spec.m, spec.n, spec.k);
    let packed_b = spec.constant_b_data().map(|b| {
        let view = MatRef {
            data: &b[spec.b_offsets[0]..],
            rows: spec.k,
            cols: spec.n,
            row_stride: spec.b_row_stride,
            col_stride: spec.b_col_stride,
        };
        Arc::new(gemm::PackedB::with_config(&view, &config))
    });
    Prepared::Gemm { config, packed_b }
}

pub(crate) fn run(spec: &MatMulSpec, cpu: &Prepared, io: &mut Io) -> Result<(), String> {
    let Prepared::Gemm { config, packed_b } = cpu else {
        return Err("internal: matrix product not prepared".into());
    };
    let a = io.x(0)?;
    let b = io.x(1)?;
    let c_input = if spec.c != GemmC::None {
        Some(io.x(2)?)
    } else {
        None
    };
    let scaled_c: Option<Vec<f32>> = c_input.map(|c| {
        if spec.beta != 1.0 {
            c.iter().map(|v| v * spec.beta).collect()
        } else {
            c.to_vec()
        }
    });
    let scaled_a: Option<Vec<f32>> =
        (spec.alpha != 1.0).then(|| a.iter().map(|v| v * spec.alpha).collect());
    let a = scaled_a.as_deref().unwrap_or(a);
    let batch_len = spec.m * spec.n;
    assert!(io.outs[0].len() >= spec.batch * batch_len);
    let out_ptr = SendPtr(io.outs[0].as_mut_ptr());
    let one = |batch: usize, threads: usize| {
        let am = MatRef {
            data: &a[spec.a_offsets[batch]..],
            rows: spec.m,
            cols: spec.k,
            row_stride: spec.a_row_stride,
            col_stride: spec.a_col_stride,
        };
        let bm = MatRef {
            data: &b[spec.b_offsets[batch]..],
            rows: spec.k,
            cols: spec.n,
            row_stride: spec.b_row_stride,
            col_stride: spec.b_col_stride,
        };
        // SAFETY: batch `batch` writes only its own `m × n` block of the output (inside it:
        // asserted above), whichever thread runs it.
        let c_tile = unsafe {
            std::slice::from_raw_parts_mut(out_ptr.get().add(batch * batch_len), batch_len)
        };
        let ep = match (&spec.c, scaled_c.as_deref()) {
            (GemmC::PerCol, Some(c)) => Epilogue {
                bias: BiasKind::PerCol(c),
                residual: None,
                activation: spec.activation,
            },
            (GemmC::PerRow, Some(c)) => Epilogue {
                bias: BiasKind::PerRow(c),
                residual: None,
                activation: spec.activation,
            },
            (GemmC::Full, Some(c)) => Epilogue {
                bias: BiasKind::None,
                residual: Some(c),
                activation: spec.activation,
            },
            (GemmC::Scalar, _) => Epilogue {
                bias: BiasKind::None,
                residual: None,
                activation: Activation::None,
            },
            _ => Epilogue {
                bias: BiasKind::None,
                residual: None,
                activation: spec.activation,
            },
        };
        match packed_b {
            Some(packed) => gemm::sgemm_packed_b(&am, packed, c_tile, spec.n, &ep, threads),
            None => gemm::sgemm_with(config, &am, &bm, c_tile, spec.n, &ep, threads),
        }
        if let (GemmC::Scalar, Some(c)) = (&spec.c, scaled_c.as_deref()) {
            c_tile.iter_mut().for_each(|v| *v += c[0]);
            gemm::apply_activation(&spec.activation, c_tile);
        }
    };
    // Batches shared across the threads, one GEMM each, when they divide evenly or are many:
    // attention's per-head products (12 of 128×64×128 in BERT) are too small for one GEMM to
    // split, and ran on one thread whatever the plan's count.
    let threads = io.threads;
    if crate::kernels::parallel::batches_shared(spec.batch, threads) {
        parallel_for(threads, spec.batch, |batch| one(batch, 1));
    } else {
        (0..spec.batch).for_each(|batch| one(batch, threads));
    }
    Ok(())
}

#[cfg(test)]
mod prepack_tests {
    use super::prepacks_b;

    /// Small weights pack for any product of more than a few rows; weights over 32 MiB only
    /// for few rows (a CRNN's 32 × 1024 · 1024 × 8210 head), not for a 7B decoder's prefill
    /// (512 rows · 4096 × 11008); the few rows that stream B unpacked and batched products never.
    #[test]
    fn large_weights_pack_only_for_few_rows() {
        assert!(prepacks_b(1, 8, 64, 48));
        assert!(!prepacks_b(1, 3, 64, 48));
        assert!(!prepacks_b(2, 8, 64, 48));
        assert!(prepacks_b(1, 32, 1024, 8210));
        assert!(!prepacks_b(1, 512, 4096, 11008));
        assert!(prepacks_b(1, 512, 1024, 1024));
    }
}
