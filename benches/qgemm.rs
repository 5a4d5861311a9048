//! Int8 (`vpdpbusd`) and bf16 (`vdpbf16ps`) GEMM throughput against the fp32 sgemm on the same
//! convolution-like shapes, measured in the same run, one thread.
//!
//! First a summary table: for each shape (M output channels × N pixels × K = C·kh·kw) the best
//! GOP/s over repeated calls of: fp32 `sgemm` (weights × f32 activations, the path of the fp32
//! convolutions), int8 `qgemm_wx` from f32 activations (quantized while packing, the path of a
//! pointwise convolution), int8 from u8 activations (the im2col path), bf16 `bgemm_wx` from f32,
//! and the ratios to fp32. Then the criterion groups (throughput in operations: criterion's
//! "Gelem/s" are GOP/s). `QGEMM_BENCH_QUICK=1` prints the table only.
//!
//! Buffers are written before timing, outputs go through `black_box`, every shape runs a warm-up
//! call, and the best of at least 20 calls (and 0.2 s) is reported with the median.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use roofline::kernels::conv::{self, Conv2d, ConvEpilogue};
use roofline::kernels::gemm::{self, Activation, Epilogue, MatRef};
use roofline::kernels::qgemm::{
    self, f32_to_bf16, qgemm_wx, ActSrc, BActSrc, BConv2d, BEpilogue, ChannelCoeffs,
    PackedBWeights, PackedQWeights, QConv2d, QIsa, QOut,
};

/// (name, M, N, K): ResNet-50 and MobileNetV2 convolutions at batch 1, and a dense layer.
const SHAPES: &[(&str, usize, usize, usize)] = &[
    ("r50 conv2 1x1 64->64 56x56", 64, 3136, 64),
    ("r50 conv2 3x3 64->64 56x56", 64, 3136, 576),
    ("r50 conv2 1x1 64->256 56x56", 256, 3136, 64),
    ("r50 conv3 3x3 128 28x28", 128, 784, 1152),
    ("r50 conv4 3x3 256 14x14", 256, 196, 2304),
    ("r50 conv4 1x1 1024->256 14x14", 256, 196, 1024),
    ("r50 conv5 3x3 512 7x7", 512, 49, 4608),
    ("r50 conv5 1x1 512->2048 7x7", 2048, 49, 512),
    ("mbv2 1x1 16->96 112x112", 96, 12544, 16),
    ("mbv2 1x1 144->24 56x56", 24, 3136, 144),
    ("mbv2 1x1 192->64 14x14", 64, 196, 384),
    ("mbv2 1x1 320->1280 7x7", 1280, 49, 320),
];

struct Data {
    m: usize,
    n: usize,
    k: usize,
    w_f32: Vec<f32>,
    x_f32: Vec<f32>,
    x_u8: Vec<u8>,
    wq: PackedQWeights,
    coeffs: ChannelCoeffs,
    wb: PackedBWeights,
    out: Vec<f32>,
}

fn data(m: usize, n: usize, k: usize) -> Data {
    let w_f32: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919 % 255) as f32 - 127.0) / 127.0)
        .collect();
    let x_f32: Vec<f32> = (0..k * n)
        .map(|i| (i * 104_729 % 251) as f32 / 125.0 - 1.0)
        .collect();
    let x_u8: Vec<u8> = (0..k * n).map(|i| (i * 31 % 256) as u8).collect();
    let w_i8: Vec<i8> = w_f32.iter().map(|&v| (v * 127.0).round() as i8).collect();
    let wq = PackedQWeights::for_conv(QIsa::detect(), &w_i8, m, k);
    let coeffs = ChannelCoeffs::new(&[1.0 / 127.0], wq.sums(), 2.0 / 255.0, 128, None);
    let wb_bits: Vec<u16> = w_f32.iter().map(|&v| f32_to_bf16(v)).collect();
    let wb = PackedBWeights::for_conv(qgemm::BIsa::detect(), &wb_bits, m, k);
    Data {
        m,
        n,
        k,
        w_f32,
        x_f32,
        x_u8,
        wq,
        coeffs,
        wb,
        out: vec![0.0; m * n],
    }
}

#[derive(Clone, Copy)]
enum Variant {
    Fp32,
    Int8F32,
    Int8U8,
    Bf16,
}

fn call(d: &mut Data, v: Variant) {
    let (m, n, k) = (d.m, d.n, d.k);
    match v {
        Variant::Fp32 => {
            let a = MatRef::row_major(&d.w_f32, m, k);
            let b = MatRef::row_major(&d.x_f32, k, n);
            gemm::sgemm(&a, &b, &mut d.out, n, &Epilogue::NONE, 1);
        }
        Variant::Int8F32 | Variant::Int8U8 => {
            let src = match v {
                Variant::Int8F32 => ActSrc::F32 {
                    data: &d.x_f32,
                    ld: n,
                    inv_scale: 127.5,
                    zero_point: 128,
                },
                _ => ActSrc::U8 {
                    data: &d.x_u8,
                    ld: n,
                },
            };
            let epi = d.coeffs.epilogue(None, Activation::None);
            qgemm_wx(
                &d.wq,
                &src,
                n,
                QOut::F32 {
                    data: &mut d.out,
                    requant: None,
                },
                n,
                &epi,
                1,
            );
        }
        Variant::Bf16 => {
            let epi = BEpilogue {
                bias: None,
                residual: None,
                activation: Activation::None,
            };
            qgemm::bgemm_wx(
                &d.wb,
                &BActSrc::F32 {
                    data: &d.x_f32,
                    ld: n,
                },
                n,
                &mut d.out,
                n,
                &epi,
                1,
            );
        }
    }
    black_box(&d.out);
}

/// (best, median) GOP/s.
fn measure(d: &mut Data, v: Variant) -> (f64, f64) {
    let ops = 2.0 * (d.m * d.n * d.k) as f64;
    call(d, v);
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 20 || start.elapsed() < Duration::from_millis(200) {
        let t = Instant::now();
        call(d, v);
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    (ops / times[0] / 1e9, ops / times[times.len() / 2] / 1e9)
}

fn summary() {
    println!(
        "qgemm vs sgemm, 1 thread; int8 variant {}, bf16 variant {}, fp32 variant {}",
        QIsa::detect().name(),
        qgemm::BIsa::detect().name(),
        gemm::isa_name()
    );
    println!(
        "{:<32} {:>9} {:>9} {:>9} {:>9}   {:>6} {:>6} {:>6}",
        "shape (M x N x K)", "fp32", "int8<f32", "int8<u8", "bf16", "i8/f32", "u8/f32", "bf/f32"
    );
    let mut geo = [0.0f64; 3];
    for &(name, m, n, k) in SHAPES {
        let mut d = data(m, n, k);
        let f = measure(&mut d, Variant::Fp32).0;
        let q = measure(&mut d, Variant::Int8F32).0;
        let u = measure(&mut d, Variant::Int8U8).0;
        let b = measure(&mut d, Variant::Bf16).0;
        geo[0] += (q / f).ln();
        geo[1] += (u / f).ln();
        geo[2] += (b / f).ln();
        println!(
            "{:<32} {:>9.1} {:>9.1} {:>9.1} {:>9.1}   {:>5.2}x {:>5.2}x {:>5.2}x",
            format!("{name} ({m}x{n}x{k})"),
            f,
            q,
            u,
            b,
            q / f,
            u / f,
            b / f
        );
    }
    let count = SHAPES.len() as f64;
    println!(
        "geometric mean of the ratios: int8<f32 {:.2}x, int8<u8 {:.2}x, bf16 {:.2}x (GOP/s best of >= 20 calls)",
        (geo[0] / count).exp(),
        (geo[1] / count).exp(),
        (geo[2] / count).exp()
    );
}

/// (name, C, M, H=W, k, stride, pad): whole convolutions (quantize + im2col + GEMM + epilogue).
const CONVS: &[(&str, usize, usize, usize, usize, usize, usize)] = &[
    ("r50 stem 7x7/2 3->64 224", 3, 64, 224, 7, 2, 3),
    ("r50 3x3 64 56", 64, 64, 56, 3, 1, 1),
    ("r50 3x3/2 128 56->28", 128, 128, 56, 3, 2, 1),
    ("r50 1x1/2 256->512 56->28", 256, 512, 56, 1, 2, 0),
    ("r50 1x1 256->64 56", 256, 64, 56, 1, 1, 0),
    ("r50 3x3 512 7", 512, 512, 7, 3, 1, 1),
    ("mbv2 1x1 16->96 112", 16, 96, 112, 1, 1, 0),
];

fn conv_table() {
    println!("\nwhole convolutions (NCHW, batch 1, bias + ReLU), 1 thread: best ms and GOP/s");
    println!(
        "{:<28} {:>9} {:>9} {:>9}   {:>6} {:>6}",
        "conv", "fp32", "int8", "bf16", "i8/f32", "bf/f32"
    );
    for &(name, c, m, hw, k, stride, pad) in CONVS {
        let out = (hw + 2 * pad - k) / stride + 1;
        let geom = Conv2d {
            batch: 1,
            in_channels: c,
            in_h: hw,
            in_w: hw,
            out_channels: m,
            kernel_h: k,
            kernel_w: k,
            stride_h: stride,
            stride_w: stride,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: pad,
            pad_left: pad,
            out_h: out,
            out_w: out,
            group: 1,
        };
        let taps = c * k * k;
        let x: Vec<f32> = (0..c * hw * hw)
            .map(|i| (i * 7919 % 251) as f32 / 125.0 - 1.0)
            .collect();
        let w: Vec<f32> = (0..m * taps)
            .map(|i| ((i * 104_729 % 255) as f32 - 127.0) / 1270.0)
            .collect();
        let bias: Vec<f32> = (0..m).map(|i| i as f32 * 0.01).collect();
        let wq: Vec<i8> = w.iter().map(|&v| (v * 1270.0).round() as i8).collect();
        let wb: Vec<u16> = w.iter().map(|&v| f32_to_bf16(v)).collect();
        let qc = QConv2d::new(geom, &wq, &[0.1 / 127.0], Some(&bias), 2.0 / 255.0, 128);
        let bc = BConv2d::new(geom, &wb, Some(&bias));
        let mut y = vec![0.0f32; m * out * out];
        let mut scratch = vec![0.0f32; geom.scratch_len()];
        let ops = geom.flops() as f64;
        let mut time = |f: &mut dyn FnMut(&mut [f32])| -> f64 {
            f(&mut y);
            let mut best = f64::INFINITY;
            let start = Instant::now();
            let mut n = 0;
            while n < 10 || start.elapsed() < Duration::from_millis(200) {
                let t = Instant::now();
                f(&mut y);
                best = best.min(t.elapsed().as_secs_f64());
                n += 1;
            }
            black_box(&y);
            best
        };
        let ep = ConvEpilogue {
            bias: Some(&bias),
            residual: None,
            activation: Activation::Relu,
        };
        let f = time(&mut |y| conv::conv2d(&geom, &x, &w, &ep, y, &mut scratch, 1));
        let q = time(&mut |y| qc.run(&x, None, Activation::Relu, None, y, 1));
        let b = time(&mut |y| bc.run(&x, None, Activation::Relu, y, 1));
        println!(
            "{:<28} {:>5.3} ms {:>5.3} ms {:>5.3} ms   {:>5.2}x {:>5.2}x   ({:.0} / {:.0} / {:.0} GOP/s)",
            name, f * 1e3, q * 1e3, b * 1e3, f / q, f / b, ops / f / 1e9, ops / q / 1e9, ops / b / 1e9
        );
    }
}

fn main() {
    summary();
    conv_table();
    if std::env::var_os("QGEMM_BENCH_QUICK").is_some() {
        return;
    }
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .measurement_time(Duration::from_secs(2));
    let mut group = c.benchmark_group("qgemm");
    for &(name, m, n, k) in SHAPES.iter().take(8) {
        let mut d = data(m, n, k);
        group.throughput(Throughput::Elements(2 * (m * n * k) as u64));
        for (label, v) in [
            ("fp32", Variant::Fp32),
            ("int8", Variant::Int8F32),
            ("bf16", Variant::Bf16),
        ] {
            group.bench_with_input(BenchmarkId::new(label, name), &v, |bch, &v| {
                bch.iter(|| call(&mut d, v))
            });
        }
    }
    group.finish();
    c.final_summary();
}
