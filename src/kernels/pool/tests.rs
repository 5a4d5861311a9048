//! Tests of the pooling kernels against naive window loops.
use super::*;

fn naive_max(p: &Pool2d, input: &[f32]) -> Vec<f32> {
    let mut out = vec![f32::NEG_INFINITY; p.planes * p.out_h * p.out_w];
    for plane in 0..p.planes {
        for y in 0..p.out_h {
            for x in 0..p.out_w {
                for ky in 0..p.kernel_h {
                    for kx in 0..p.kernel_w {
                        let iy = (y * p.stride_h + ky * p.dilation_h) as isize - p.pad_top as isize;
                        let ix =
                            (x * p.stride_w + kx * p.dilation_w) as isize - p.pad_left as isize;
                        if iy >= 0 && ix >= 0 && (iy as usize) < p.in_h && (ix as usize) < p.in_w {
                            let v = input[(plane * p.in_h + iy as usize) * p.in_w + ix as usize];
                            let o = &mut out[(plane * p.out_h + y) * p.out_w + x];
                            *o = o.max(v);
                        }
                    }
                }
            }
        }
    }
    out
}

/// The window loop of ONNX's AveragePool: the mean over the taps inside the input, or
/// with `count_include_pad` the sum over those divided by the taps inside the padded
/// extent.
fn naive_avg(
    p: &Pool2d,
    include_pad: bool,
    pad_bottom: usize,
    pad_right: usize,
    input: &[f32],
) -> Vec<f32> {
    let mut out = vec![0.0; p.planes * p.out_h * p.out_w];
    for plane in 0..p.planes {
        for y in 0..p.out_h {
            for x in 0..p.out_w {
                let (mut sum, mut inside, mut padded) = (0.0f64, 0usize, 0usize);
                for ky in 0..p.kernel_h {
                    for kx in 0..p.kernel_w {
                        let iy = (y * p.stride_h + ky * p.dilation_h) as isize - p.pad_top as isize;
                        let ix =
                            (x * p.stride_w + kx * p.dilation_w) as isize - p.pad_left as isize;
                        let in_padded = iy >= -(p.pad_top as isize)
                            && iy < (p.in_h + pad_bottom) as isize
                            && ix >= -(p.pad_left as isize)
                            && ix < (p.in_w + pad_right) as isize;
                        padded += usize::from(in_padded);
                        if iy >= 0 && ix >= 0 && (iy as usize) < p.in_h && (ix as usize) < p.in_w {
                            sum += f64::from(
                                input[(plane * p.in_h + iy as usize) * p.in_w + ix as usize],
                            );
                            inside += 1;
                        }
                    }
                }
                let divisor = if include_pad { padded } else { inside };
                out[(plane * p.out_h + y) * p.out_w + x] = if divisor > 0 {
                    (sum / divisor as f64) as f32
                } else {
                    0.0
                };
            }
        }
    }
    out
}

#[test]
fn separable_avg_pool_matches_the_window_loop_on_every_isa() {
    // (kernel, stride, pad begin, pad end, dilation, size): Inception's 3x3 s1 p1, a
    // ceil-mode window past the padded end, stride 3, dilation, 1x1.
    for (k, s, pad, pad_end, d, hw) in [
        (3, 1, 1, 1, 1, 14),
        (3, 2, 0, 1, 1, 8),
        (2, 2, 0, 0, 1, 9),
        // Wide enough for the vector stride-2 pass (16 outputs a step), ceil mode too.
        (2, 2, 0, 0, 1, 40),
        (3, 2, 0, 1, 1, 47),
        (3, 3, 1, 1, 1, 11),
        // Strides past 2 fold each output's taps from the row: dilated, and a window
        // narrower than the stride (taps skipped).
        (3, 4, 1, 1, 2, 23),
        (2, 3, 0, 0, 1, 17),
        (5, 2, 2, 2, 1, 13),
        (3, 1, 2, 2, 2, 10),
        (1, 2, 0, 0, 1, 6),
        // Stride 1 runs plane-at-a-time: a whole-plane window, padding at one end only,
        // a 1x1 window.
        (7, 1, 0, 0, 1, 7),
        (3, 1, 0, 2, 1, 9),
        (2, 1, 1, 0, 1, 8),
        (1, 1, 0, 0, 1, 5),
        // Rows of several 16-output blocks, the last running past the row's end; a
        // dilated window on the run-time tap list.
        (3, 1, 1, 1, 1, 37),
        (2, 1, 0, 1, 1, 33),
        (3, 1, 2, 2, 2, 20),
        // Windows of more than nine taps on stride 1 (separable on the grid), rows wider than
        // the narrow-plane kernel takes: YOLO's 5×5 SPPF window, a 7×7 average.
        (5, 1, 2, 2, 1, 20),
        (7, 1, 3, 3, 1, 21),
        // The narrow-plane kernel's limits: 32 input and 16 output columns.
        (2, 2, 0, 0, 1, 31),
        (3, 1, 1, 1, 1, 15),
    ] {
        let (in_h, in_w) = (hw, hw + 1);
        let out_dim = |n: usize| (n + pad + pad_end - d * (k - 1) - 1).div_ceil(s) + 1;
        let p = Pool2d {
            planes: 2,
            in_h,
            in_w,
            kernel_h: k,
            kernel_w: k,
            stride_h: s,
            stride_w: s,
            dilation_h: d,
            dilation_w: d,
            pad_top: pad,
            pad_left: pad,
            out_h: out_dim(in_h),
            out_w: out_dim(in_w),
        };
        let input: Vec<f32> = (0..2 * in_h * in_w)
            .map(|i| ((i * 7919) % 101) as f32 - 50.0)
            .collect();
        // Each level runs its own stride-2 path: AVX-512 and AVX2 their de-interleaving row
        // kernels (AVX2 ends the 21-output row with an overlapping block), scalar the
        // generic phasing.
        for include_pad in [false, true] {
            let want = naive_avg(&p, include_pad, pad_end, pad_end, &input);
            for level in crate::kernels::simd::available_levels() {
                let mut got = vec![0.0; want.len()];
                avg_pool_at(level, &p, include_pad, pad_end, pad_end, &input, &mut got);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                        "{p:?} pad {include_pad} at {level:?}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn separable_max_pool_matches_the_window_loop_on_every_isa() {
    for (k, s, pad, d, hw) in [
        (3, 2, 1, 1, 112),
        (3, 2, 1, 1, 31),
        (2, 2, 0, 1, 9),
        (2, 2, 0, 1, 40),
        (3, 2, 0, 1, 111),
        (3, 1, 1, 2, 10),
        (3, 2, 0, 1, 7),
        // SqueezeNet's unpadded 55² and 27² rows (here 55 and 27 wide), whose last block
        // loads one float past the row; a padded 14-wide row with 7 outputs (one short block).
        (3, 2, 0, 1, 54),
        (3, 2, 0, 1, 26),
        (3, 2, 1, 1, 13),
        // Rows narrower than an AVX2 vector: its window kernel's scalar loop.
        (3, 2, 1, 1, 5),
        (2, 2, 0, 1, 4),
        (3, 3, 1, 1, 11),
        (3, 4, 1, 2, 23),
        (3, 3, 0, 1, 78),
        (5, 2, 2, 1, 13),
        (1, 2, 0, 1, 6),
        (3, 1, 1, 1, 7),
        (5, 1, 0, 1, 9),
        (1, 1, 0, 1, 4),
        (3, 1, 1, 1, 28),
        (2, 1, 0, 1, 47),
        // More than nine taps on stride 1, rows past 16 outputs: 5×5 (SPPF), dilated, 7×7.
        (5, 1, 2, 1, 20),
        (5, 1, 2, 2, 24),
        (7, 1, 3, 1, 19),
    ] {
        let out = (hw + 2 * pad - d * (k - 1) - 1) / s + 1;
        let p = Pool2d {
            planes: 3,
            in_h: hw,
            in_w: hw + 1,
            kernel_h: k,
            kernel_w: k,
            stride_h: s,
            stride_w: s,
            dilation_h: d,
            dilation_w: d,
            pad_top: pad,
            pad_left: pad,
            out_h: out,
            out_w: (hw + 1 + 2 * pad - d * (k - 1) - 1) / s + 1,
        };
        let input: Vec<f32> = (0..3 * hw * (hw + 1))
            .map(|i| ((i * 7919) % 101) as f32 - 50.0)
            .collect();
        let want = naive_max(&p, &input);
        for level in crate::kernels::simd::available_levels() {
            let mut got = vec![0.0; want.len()];
            max_pool_at(level, &p, &input, &mut got);
            assert_eq!(got, want, "{p:?} at {level:?}");
        }
    }
}

/// The stride-2 window kernels load a block's columns past the last one they use (the third
/// tap keeps its loads' even columns) and may read the next row's first float: a huge value
/// there must never reach an output, for max or sum, on any row width around the block size.
#[test]
fn stride2_windows_never_use_the_float_after_a_row() {
    for in_w in [17, 18, 25, 27, 33, 55, 56] {
        for pad in [0, 1] {
            let out_w = (in_w + 2 * pad - 3) / 2 + 1;
            let in_h = 9;
            let p = Pool2d {
                planes: 4,
                in_h,
                in_w,
                kernel_h: 3,
                kernel_w: 3,
                stride_h: 2,
                stride_w: 2,
                dilation_h: 1,
                dilation_w: 1,
                pad_top: pad,
                pad_left: pad,
                out_h: (in_h + 2 * pad - 3) / 2 + 1,
                out_w,
            };
            // Column 0 huge: with no left padding only the first output's window holds it.
            let input: Vec<f32> = (0..p.planes * in_h * in_w)
                .map(|i| {
                    if i % in_w == 0 {
                        1.0e30
                    } else {
                        ((i * 31) % 17) as f32 - 8.0
                    }
                })
                .collect();
            let want_max = naive_max(&p, &input);
            let want_avg = naive_avg(&p, false, pad, pad, &input);
            for level in crate::kernels::simd::available_levels() {
                let mut got = vec![0.0; want_max.len()];
                max_pool_at(level, &p, &input, &mut got);
                assert_eq!(got, want_max, "max {p:?} at {level:?}");
                avg_pool_at(level, &p, false, pad, pad, &input, &mut got);
                for (g, w) in got.iter().zip(&want_avg) {
                    assert!(
                        (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                        "avg {p:?} at {level:?}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

/// The float a stride-2 block may read past a row must never lie past `input`: the input ends
/// right before a page the process may not read, so a load past its end faults the test.
/// Window heights 1-3, top and left paddings apart, widths whose last block reaches one float
/// past the row.
#[cfg(all(unix, target_arch = "x86_64"))]
#[test]
fn stride2_windows_never_read_past_the_input() {
    const PAGE: usize = 4096;
    for (in_w, kernel_h, pad_top, pad_left) in [
        (55, 3, 0, 0),
        (27, 3, 0, 0),
        (18, 3, 1, 1),
        (33, 2, 0, 0),
        (25, 1, 0, 1),
        (55, 3, 1, 0),
        (56, 3, 0, 1),
    ] {
        let (in_h, planes): (usize, usize) = (7, 3);
        let floats = planes * in_h * in_w;
        let data_pages = (floats * 4).div_ceil(PAGE);
        // SAFETY: an anonymous private mapping of `data_pages + 1` pages, the last made
        // unreadable; the input slice ends exactly at that page and is unmapped below.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                (data_pages + 1) * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let guard = (base as *mut u8).add(data_pages * PAGE);
            assert_eq!(libc::mprotect(guard.cast(), PAGE, libc::PROT_NONE), 0);
            let start = (guard as *mut f32).sub(floats);
            let input = std::slice::from_raw_parts_mut(start, floats);
            for (i, v) in input.iter_mut().enumerate() {
                *v = ((i * 13) % 29) as f32 - 14.0;
            }
            let p = Pool2d {
                planes,
                in_h,
                in_w,
                kernel_h,
                kernel_w: 3,
                stride_h: 2,
                stride_w: 2,
                dilation_h: 1,
                dilation_w: 1,
                pad_top,
                pad_left,
                out_h: (in_h + 2 * pad_top - kernel_h) / 2 + 1,
                out_w: (in_w + 2 * pad_left - 3) / 2 + 1,
            };
            let want = naive_max(&p, input);
            for level in crate::kernels::simd::available_levels() {
                let mut got = vec![0.0; want.len()];
                max_pool_at(level, &p, input, &mut got);
                assert_eq!(got, want, "{p:?} at {level:?}");
            }
            libc::munmap(base, (data_pages + 1) * PAGE);
        }
    }
}

#[test]
fn global_pools_match_the_folded_scalar_path_on_every_plane_size() {
    for plane_size in [1, 7, 15, 16, 17, 31, 32, 33, 49, 64, 100, 196] {
        let planes = 37;
        let input: Vec<f32> = (0..planes * plane_size)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.01 - 5.0)
            .collect();
        for max in [false, true] {
            let mut fast = vec![0.0f32; planes];
            let mut scalar = vec![0.0f32; planes];
            global_pool(&input, plane_size, max, &mut fast);
            global_pool_folded::at(IsaLevel::Scalar, &input, plane_size, max, &mut scalar);
            for (plane, (a, b)) in fast.iter().zip(&scalar).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "plane size {plane_size}, max {max}, plane {plane}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn wide_pools_match_the_window_loop() {
    // Stride-1 K×K windows on rows past one vector: GoogLeNet's 28×28 3×3 (pad 1), YOLO's SPP
    // 5/9/13 (pad K/2) on 20×20 and odd planes, unpadded, padding up to K − 1, widths that end
    // mid-vector, rows fewer than the window, one and many planes.
    for (kernel, pad, in_h, in_w, planes) in [
        (3, 1, 28, 28, 3),
        (3, 0, 9, 40, 2),
        (3, 2, 6, 33, 1),
        (3, 1, 5, 17, 4),
        (3, 1, 3, 64, 1),
        (3, 0, 3, 19, 1),
        (5, 2, 20, 20, 2),
        (5, 4, 7, 21, 1),
        (5, 0, 9, 37, 1),
        (9, 4, 20, 20, 1),
        (9, 8, 3, 18, 1),
        (13, 6, 20, 20, 2),
        (13, 6, 15, 33, 1),
    ] {
        let p = stride1_square(planes, (in_h, in_w), kernel, pad);
        let input: Vec<f32> = (0..planes * in_h * in_w)
            .map(|i| ((i * 7919) % 101) as f32 - 50.0)
            .collect();
        let want = naive_max(&p, &input);
        for level in crate::kernels::simd::available_levels() {
            let mut got = vec![0.0; want.len()];
            max_pool_at(level, &p, &input, &mut got);
            assert_eq!(got, want, "max {p:?} at {level:?}");
            for include_pad in [false, true] {
                let want = naive_avg(&p, include_pad, pad, pad, &input);
                let mut got = vec![0.0; want.len()];
                avg_pool_at(level, &p, include_pad, pad, pad, &input, &mut got);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "avg {p:?} {g} {w}"
                    );
                }
            }
        }
    }
    // The kernel is the one these geometries take on AVX-512 (YOLO's SPPF 5×5 too).
    let mut p = stride1_square(1, (28, 28), 3, 1);
    if crate::kernels::simd::isa_level() == crate::kernels::simd::IsaLevel::Avx512 {
        assert!(wide::wide_applies(
            crate::kernels::simd::IsaLevel::Avx512,
            &p
        ));
        (p.kernel_h, p.kernel_w, p.pad_top, p.pad_left) = (5, 5, 2, 2);
        assert!(wide::wide_applies(
            crate::kernels::simd::IsaLevel::Avx512,
            &p
        ));
    }
}

/// A stride-1 `kernel × kernel` window over `planes` planes of `in_h × in_w`, padded by `pad`
/// before and after.
fn stride1_square(
    planes: usize,
    (in_h, in_w): (usize, usize),
    kernel: usize,
    pad: usize,
) -> Pool2d {
    Pool2d {
        planes,
        in_h,
        in_w,
        kernel_h: kernel,
        kernel_w: kernel,
        stride_h: 1,
        stride_w: 1,
        dilation_h: 1,
        dilation_w: 1,
        pad_top: pad,
        pad_left: pad,
        out_h: in_h + 2 * pad + 1 - kernel,
        out_w: in_w + 2 * pad + 1 - kernel,
    }
}

#[test]
fn flat_pools_match_the_window_loop_and_stay_inside_their_planes() {
    // Stride-1 windows whose output plane is the input's, on planes of up to 128 floats:
    // Inception's 3×3 on 6² and 7², a 5×5, one-float planes, rows wider than a vector, the
    // 128-float limit, and 2×2 windows padded on one side (SAME_UPPER: pad_top 0; SAME_LOWER:
    // 1).
    for (kernel, pad, in_h, in_w, planes) in [
        (3, 1, 6, 6, 5),
        (3, 1, 8, 16, 3),
        (3, 1, 7, 7, 4),
        (5, 2, 9, 9, 2),
        (3, 1, 1, 1, 3),
        (3, 1, 2, 17, 2),
        (1, 0, 5, 5, 2),
        (3, 1, 11, 11, 2),
        (2, 0, 5, 5, 3),
        (2, 1, 4, 7, 3),
    ] {
        // The output plane is the input's: `kernel − 1 − pad` padded after.
        let p = Pool2d {
            out_h: in_h,
            out_w: in_w,
            ..stride1_square(planes, (in_h, in_w), kernel, pad)
        };
        let pad_after = kernel - 1 - pad;
        let input: Vec<f32> = (0..planes * in_h * in_w)
            .map(|i| ((i * 7919) % 101) as f32 - 50.0)
            .collect();
        let len = planes * in_h * in_w;
        // Outputs are written into the front of a longer buffer: what follows (another
        // thread's planes) must keep its sentinel.
        let sentinel = 12345.0;
        for level in crate::kernels::simd::available_levels() {
            let want = naive_max(&p, &input);
            let mut got = vec![sentinel; len + 16];
            max_pool_at(level, &p, &input, &mut got[..len]);
            assert_eq!(got[..len], want[..], "max {p:?} at {level:?}");
            assert!(
                got[len..].iter().all(|&v| v == sentinel),
                "max {p:?} wrote past its planes"
            );
            for include_pad in [false, true] {
                let want = naive_avg(&p, include_pad, pad_after, pad_after, &input);
                let mut got = vec![sentinel; len + 16];
                avg_pool_at(
                    level,
                    &p,
                    include_pad,
                    pad_after,
                    pad_after,
                    &input,
                    &mut got[..len],
                );
                for (g, w) in got[..len].iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "avg {p:?} {g} {w}"
                    );
                }
                assert!(
                    got[len..].iter().all(|&v| v == sentinel),
                    "avg {p:?} wrote past its planes"
                );
            }
        }
        if crate::kernels::simd::isa_level() == crate::kernels::simd::IsaLevel::Avx512 {
            assert!(
                flat::flat_applies(crate::kernels::simd::IsaLevel::Avx512, &p),
                "{p:?}"
            );
        }
    }
}
