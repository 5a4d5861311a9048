//! Winograd minimal filtering F(m×m, 3×3) for 3×3, stride-1, undilated, ungrouped convolutions
//! (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).
//!
//! The output is cut into m×m tiles; each tile needs an α×α input patch (α = m + 2). With the
//! filter transformed once (`U = G·g·Gᵀ`, α×α per output/input channel pair) and each patch
//! transformed per run (`V = Bᵀ·d·B`), the convolution becomes α² independent GEMMs
//! `M[ξ] = U[ξ] (K×C) · V[ξ] (C×tiles)`, and each output tile is `Aᵀ·M·A`. F(2×2) does
//! 16 multiplies per tile where direct convolution does 36 (2.25× fewer), F(4×4) 36 where direct
//! does 144 (4× fewer); both add the transforms and α²/9 times the weight bytes, and the GEMMs
//! have one column per tile, so small planes fill the microkernel's tiles badly. Whether that
//! pays is the roofline's decision per layer (`analysis::conv_algorithm`); this module only
//! runs the variant it is given.
//!
//! Layout: `V` is `[α²][C][tiles]`, `M` is `[α²][K][tiles]` (tiles row-major over the output),
//! both in the caller's scratch. Transforms work on 16 tiles at a time, one lane per tile, so
//! they vectorise for every ISA (`multiversion!`).

use super::geometry::{Conv2d, ConvEpilogue};
use crate::kernels::gemm::{self, Activation, Epilogue, MatRef};
use crate::kernels::parallel::{parallel_for, SendPtr};
use crate::kernels::simd::multiversion;

/// Output tile of the Winograd variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum WinogradTile {
    /// F(2×2, 3×3): 4×4 transforms, exact in f32 up to rounding.
    F2,
    /// F(4×4, 3×3): 6×6 transforms with points 0, ±1, ±2 (rounding error a few times F2's).
    F4,
}

impl WinogradTile {
    pub const ALL: [WinogradTile; 2] = [WinogradTile::F2, WinogradTile::F4];

    /// Output pixels per tile side (m).
    pub fn output(self) -> usize {
        match self {
            WinogradTile::F2 => 2,
            WinogradTile::F4 => 4,
        }
    }

    /// Input patch side (α = m + 2).
    pub fn alpha(self) -> usize {
        self.output() + 2
    }

    pub fn name(self) -> &'static str {
        match self {
            WinogradTile::F2 => "winograd F(2x2,3x3)",
            WinogradTile::F4 => "winograd F(4x4,3x3)",
        }
    }
}

/// Whether the geometry can run as Winograd: 3×3 kernel, stride 1, no dilation, one group.
pub fn eligible(geom: &Conv2d) -> bool {
    geom.kernel_h == 3
        && geom.kernel_w == 3
        && geom.stride_h == 1
        && geom.stride_w == 1
        && geom.dilation_h == 1
        && geom.dilation_w == 1
        && geom.group == 1
        && geom.out_h > 0
        && geom.out_w > 0
}

/// The work and traffic one image of a Winograd convolution does, for the cost model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WinogradWork {
    /// Output tiles per image.
    pub tiles: usize,
    /// Multiply-adds of the α² GEMMs as written (`α²·K·C·tiles`).
    pub gemm_macs: u64,
    /// FLOPs of the input and output transforms (adds and multiplies by constants).
    pub transform_flops: u64,
    /// Bytes of the transformed weights (`α²·K·C` floats).
    pub weight_bytes: u64,
    /// Bytes of the transformed input and the GEMM outputs (`α²·(C + K)·tiles` floats): each is
    /// written once and read once.
    pub scratch_bytes: u64,
}

/// Work of one image of `geom` (which must be [`eligible`]) with `tile`.
pub fn work(geom: &Conv2d, tile: WinogradTile) -> WinogradWork {
    let (m, alpha) = (tile.output(), tile.alpha());
    let tiles = geom.out_h.div_ceil(m) * geom.out_w.div_ceil(m);
    let (c, k) = (geom.in_channels, geom.out_channels);
    let a2 = (alpha * alpha) as u64;
    // Each 1-D transform of α values costs about 2α adds (Bᵀ rows have 3-4 non-zeros; Aᵀ rows
    // up to α): applied over α columns then α rows for the input, α columns then m rows for
    // the output.
    let input_flops = (2 * alpha * 2 * alpha * alpha) as u64;
    let output_flops = (2 * alpha * (alpha * m + m * m)) as u64;
    WinogradWork {
        tiles,
        gemm_macs: a2 * (k * c * tiles) as u64,
        transform_flops: (tiles as u64) * (c as u64 * input_flops + k as u64 * output_flops),
        weight_bytes: 4 * a2 * (k * c) as u64,
        scratch_bytes: 4 * a2 * ((c + k) * tiles) as u64,
    }
}

/// Scratch floats [`conv2d_winograd`] needs for `geom` with `tile` on one thread: `V` and `M`
/// of one block.
pub fn scratch_len(geom: &Conv2d, tile: WinogradTile) -> usize {
    scratch_len_threads(geom, tile, 1)
}

/// Scratch floats [`conv2d_winograd`] needs for `geom` with `tile` on `threads` threads: one
/// block's `V` and `M`, or each worker's when the tile rows are split across them.
pub fn scratch_len_threads(geom: &Conv2d, tile: WinogradTile, threads: usize) -> usize {
    let (m, a2) = (tile.output(), tile.alpha() * tile.alpha());
    let per_block =
        |tiling: &Tiling| a2 * (geom.in_channels + geom.out_channels) * tiling.tile_stride;
    let tiling = Tiling::new(geom, m);
    match spatial_split(&tiling, threads) {
        Some(rows_per_worker) => {
            let split = Tiling::with_max_rows(geom, m, rows_per_worker);
            let blocks = geom.batch * split.tiles_h.div_ceil(split.block_rows);
            per_block(&tiling).max(threads.min(blocks) * per_block(&split))
        }
        None => per_block(&tiling),
    }
}

/// Tile rows per worker when `threads` workers each run whole blocks (see
/// [`conv2d_winograd`]), or `None` when the phases are split instead.
fn spatial_split(tiling: &Tiling, threads: usize) -> Option<usize> {
    let rows_per_worker = tiling.tiles_h.div_ceil(threads.max(1));
    (threads > 1 && rows_per_worker * tiling.tiles_w >= MIN_WORKER_TILES).then_some(rows_per_worker)
}

/// The filter transformed (`U = G·g·Gᵀ`) and packed once: α² GEMM A operands of `K × C`.
pub struct WinogradWeights {
    tile: WinogradTile,
    packed: Vec<gemm::PackedA>,
}

impl std::fmt::Debug for WinogradWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WinogradWeights({}, {} bytes)",
            self.tile.name(),
            self.bytes()
        )
    }
}

impl WinogradWeights {
    /// Transforms `weights` (`[K, C, 3, 3]`) of an [`eligible`] geometry.
    pub fn new(
        config: &gemm::GemmConfig,
        geom: &Conv2d,
        tile: WinogradTile,
        weights: &[f32],
    ) -> WinogradWeights {
        assert!(eligible(geom), "Winograd needs a 3×3 stride-1 convolution");
        let (k, c, alpha) = (geom.out_channels, geom.in_channels, tile.alpha());
        assert!(weights.len() >= k * c * 9, "Winograd: weights too short");
        let a2 = alpha * alpha;
        let mut u = vec![0.0f32; a2 * k * c];
        for oc in 0..k {
            for ic in 0..c {
                let g = &weights[(oc * c + ic) * 9..(oc * c + ic) * 9 + 9];
                let transformed = filter_transform(tile, g);
                for (xi, value) in transformed.iter().take(a2).enumerate() {
                    u[(xi * k + oc) * c + ic] = *value;
                }
            }
        }
        let packed = (0..a2)
            .map(|xi| {
                let m = MatRef::row_major(&u[xi * k * c..(xi + 1) * k * c], k, c);
                gemm::PackedA::with_config(&m, config)
            })
            .collect();
        WinogradWeights { tile, packed }
    }

    pub fn tile(&self) -> WinogradTile {
        self.tile
    }

    /// Bytes of the packed transformed weights.
    pub fn bytes(&self) -> usize {
        self.packed.iter().map(gemm::PackedA::bytes).sum()
    }
}

/// `G·g·Gᵀ` of one 3×3 filter, row-major α×α (in f64, rounded once).
fn filter_transform(tile: WinogradTile, g: &[f32]) -> [f32; 36] {
    let rows: &[[f64; 3]] = match tile {
        WinogradTile::F2 => &[
            [1.0, 0.0, 0.0],
            [0.5, 0.5, 0.5],
            [0.5, -0.5, 0.5],
            [0.0, 0.0, 1.0],
        ],
        WinogradTile::F4 => &[
            [0.25, 0.0, 0.0],
            [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
            [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
            [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
            [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
            [0.0, 0.0, 1.0],
        ],
    };
    let alpha = rows.len();
    // t = G·g (α×3), then u = t·Gᵀ (α×α).
    let mut t = [[0.0f64; 3]; 6];
    for (i, row) in rows.iter().enumerate() {
        for j in 0..3 {
            t[i][j] = (0..3).map(|k| row[k] * g[k * 3 + j] as f64).sum();
        }
    }
    let mut u = [0.0f32; 36];
    for i in 0..alpha {
        for (j, row) in rows.iter().enumerate() {
            u[i * alpha + j] = (0..3).map(|k| t[i][k] * row[k]).sum::<f64>() as f32;
        }
    }
    u
}

/// Tiles transformed together, one per vector lane.
const LANES: usize = 16;
type Lanes = [f32; LANES];

/// One Winograd variant's 1-D transforms on lane vectors.
trait Transform {
    const M: usize;
    const ALPHA: usize;
    /// `Bᵀ·d` of α values.
    fn input(d: &[Lanes; 6]) -> [Lanes; 6];
    /// `Aᵀ·m` of α values to m values.
    fn output(m: &[Lanes; 6]) -> [Lanes; 4];
    /// `dst[p · phase_plane + q] = groups[q · m + p]` for every whole group of m.
    fn deinterleave(groups: &[f32], dst: &mut [f32], phase_plane: usize);
}

#[inline(always)]
fn lanes(f: impl Fn(usize) -> f32) -> Lanes {
    std::array::from_fn(f)
}

struct F2;
struct F4;

impl Transform for F2 {
    const M: usize = 2;
    const ALPHA: usize = 4;

    #[inline(always)]
    fn deinterleave(groups: &[f32], dst: &mut [f32], phase_plane: usize) {
        let n = groups.len() / 2;
        let (p0, rest) = dst.split_at_mut(phase_plane);
        for ((g, a), b) in groups.chunks_exact(2).zip(&mut p0[..n]).zip(&mut rest[..n]) {
            *a = g[0];
            *b = g[1];
        }
    }

    #[inline(always)]
    fn input(d: &[Lanes; 6]) -> [Lanes; 6] {
        let z = [0.0; LANES];
        [
            lanes(|l| d[0][l] - d[2][l]),
            lanes(|l| d[1][l] + d[2][l]),
            lanes(|l| d[2][l] - d[1][l]),
            lanes(|l| d[1][l] - d[3][l]),
            z,
            z,
        ]
    }

    #[inline(always)]
    fn output(m: &[Lanes; 6]) -> [Lanes; 4] {
        let z = [0.0; LANES];
        [
            lanes(|l| m[0][l] + m[1][l] + m[2][l]),
            lanes(|l| m[1][l] - m[2][l] - m[3][l]),
            z,
            z,
        ]
    }
}

impl Transform for F4 {
    const M: usize = 4;
    const ALPHA: usize = 6;

    #[inline(always)]
    fn deinterleave(groups: &[f32], dst: &mut [f32], phase_plane: usize) {
        let n = groups.len() / 4;
        let (p0, rest) = dst.split_at_mut(phase_plane);
        let (p1, rest) = rest.split_at_mut(phase_plane);
        let (p2, p3) = rest.split_at_mut(phase_plane);
        let phases = p0[..n]
            .iter_mut()
            .zip(&mut p1[..n])
            .zip(&mut p2[..n])
            .zip(&mut p3[..n]);
        for (g, (((a, b), c), d)) in groups.chunks_exact(4).zip(phases) {
            *a = g[0];
            *b = g[1];
            *c = g[2];
            *d = g[3];
        }
    }

    #[inline(always)]
    fn input(d: &[Lanes; 6]) -> [Lanes; 6] {
        // Bᵀ rows: (4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0),
        // (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1).
        let s = lanes(|l| d[4][l] - 4.0 * d[2][l]); // shared by rows 1 and 2
        let t = lanes(|l| d[3][l] - 4.0 * d[1][l]);
        let p = lanes(|l| d[4][l] - d[2][l]); // shared by rows 3 and 4
        let q = lanes(|l| 2.0 * (d[3][l] - d[1][l]));
        [
            lanes(|l| 4.0 * d[0][l] - 5.0 * d[2][l] + d[4][l]),
            lanes(|l| s[l] + t[l]),
            lanes(|l| s[l] - t[l]),
            lanes(|l| p[l] + q[l]),
            lanes(|l| p[l] - q[l]),
            lanes(|l| 4.0 * d[1][l] - 5.0 * d[3][l] + d[5][l]),
        ]
    }

    #[inline(always)]
    fn output(m: &[Lanes; 6]) -> [Lanes; 4] {
        // Aᵀ rows: (1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0),
        // (0, 1, -1, 8, -8, 1).
        let sum12 = lanes(|l| m[1][l] + m[2][l]);
        let dif12 = lanes(|l| m[1][l] - m[2][l]);
        let sum34 = lanes(|l| m[3][l] + m[4][l]);
        let dif34 = lanes(|l| m[3][l] - m[4][l]);
        [
            lanes(|l| m[0][l] + sum12[l] + sum34[l]),
            lanes(|l| dif12[l] + 2.0 * dif34[l]),
            lanes(|l| sum12[l] + 4.0 * sum34[l]),
            lanes(|l| dif12[l] + 8.0 * dif34[l] + m[5][l]),
        ]
    }
}

/// Geometry of the tiling of one image.
#[derive(Clone, Copy)]
struct Tiling {
    m: usize,
    tiles_h: usize,
    tiles_w: usize,
    /// Columns of one phase plane: element `x'` of phase `p` is padded column `x'·m + p`. One
    /// lane block of slack past the last tile, so every patch load is a whole vector.
    phase_w: usize,
    /// Tile rows transformed and multiplied together (a block), so that the block's `V` and `M`
    /// stay in cache between the transforms and the GEMMs.
    block_rows: usize,
    /// Floats between channels in `V` and `M`: a block's tiles plus one lane block of slack,
    /// so every store and load of 16 tiles is a whole vector.
    tile_stride: usize,
}

/// Bytes of `V` and `M` past which an image is cut into blocks: about a core's share of L3.
/// Smaller blocks were slower on Zen 4 (64×56², 1 thread: 1.36 ms whole, 1.78 ms in 512 KiB
/// blocks): their GEMMs have fewer columns, and the tile edges waste more of the microkernel.
const BLOCK_BYTES: usize = 4 << 20;
/// Fewest tiles per block (when the channel count allows), so the GEMMs keep a few 16- or
/// 32-wide microkernel columns.
const MIN_BLOCK_TILES: usize = 64;
/// Fewest tiles per worker for the workers to split the tile rows rather than each phase.
/// Each worker of a row split streams every transformed filter through GEMMs as wide as its
/// share: at 18 tiles each (F(2×2) on 12², ZFNet-512's 256→512 and 512→512 layers, 2 threads,
/// Zen 4) the row split took 1.55 and 2.85 ms, the phase split 1.27-1.37 and 2.22-2.38 (two
/// alternated rounds); at 21-28 tiles each (512→512 on 14²) the row split scales 1.8×.
const MIN_WORKER_TILES: usize = 24;

impl Tiling {
    fn new(geom: &Conv2d, m: usize) -> Tiling {
        Tiling::with_max_rows(geom, m, usize::MAX)
    }

    /// The tiling with blocks of at most `max_rows` tile rows.
    fn with_max_rows(geom: &Conv2d, m: usize, max_rows: usize) -> Tiling {
        let (tiles_h, tiles_w) = (geom.out_h.div_ceil(m), geom.out_w.div_ceil(m));
        let alpha = m + 2;
        let row_bytes = 4 * alpha * alpha * (geom.in_channels + geom.out_channels) * tiles_w;
        // Blocks re-read the transformed weights once each; one whole-image block spills `V`
        // and `M` out of L2 instead (written and read back once). Take whichever moves less.
        let weight_bytes = 4 * alpha * alpha * geom.in_channels * geom.out_channels;
        let cached_rows = (BLOCK_BYTES / row_bytes.max(1))
            .max(MIN_BLOCK_TILES.div_ceil(tiles_w))
            .clamp(1, tiles_h);
        let blocks = tiles_h.div_ceil(cached_rows);
        let block_rows = if blocks * weight_bytes < 2 * row_bytes * tiles_h {
            cached_rows
        } else {
            tiles_h
        }
        .min(max_rows.max(1));
        Tiling {
            m,
            tiles_h,
            tiles_w,
            phase_w: tiles_w + 2 + LANES,
            block_rows,
            tile_stride: block_rows * tiles_w + LANES,
        }
    }

    /// Floats of the phase planes of one block's padded input rows.
    fn phases_len(&self) -> usize {
        self.m * (self.block_rows * self.m + 2) * self.phase_w
    }
}

/// The padded input rows of tile rows `rows` of one plane, split into `m` phase planes
/// (`phases[p][y][x'] = padded[y][x'·m + p]`), so that column `j` of 16 consecutive tiles'
/// patches is one contiguous load (`phases[j % m][y][tx0 + j / m ..]`). Only the positions the
/// input covers are written: `phases` starts zeroed for the block, and every channel of the
/// block has its padding in the same places.
#[inline(always)]
fn split_phases<T: Transform>(
    geom: &Conv2d,
    tiling: &Tiling,
    rows: (usize, usize),
    plane: &[f32],
    phases: &mut [f32],
) {
    let m = T::M;
    let pw = tiling.phase_w;
    let phase_plane = (tiling.block_rows * m + 2) * pw;
    let (pad, in_w) = (geom.pad_left, geom.in_w);
    // Padded columns X = x + pad; groups of m that lie wholly inside the input are copied
    // as a deinterleave, the ragged ends element by element.
    let first_group = pad.div_ceil(m);
    let end_group = ((pad + in_w) / m).max(first_group);
    for y in 0..(rows.1 - rows.0) * m + 2 {
        let src_y = (rows.0 * m + y) as isize - geom.pad_top as isize;
        if src_y < 0 || src_y as usize >= geom.in_h {
            continue;
        }
        let src = &plane[src_y as usize * in_w..(src_y as usize + 1) * in_w];
        let mut put = |column: usize, value: f32| {
            phases[(column % m) * phase_plane + y * pw + column / m] = value;
        };
        for column in pad..(first_group * m).min(pad + in_w) {
            put(column, src[column - pad]);
        }
        for column in (end_group * m).max(pad)..pad + in_w {
            put(column, src[column - pad]);
        }
        if end_group > first_group {
            let groups = &src[first_group * m - pad..end_group * m - pad];
            T::deinterleave(groups, &mut phases[y * pw + first_group..], phase_plane);
        }
    }
}

/// Where one channel's tiles lie in `V` or `M`: at `offset` in the ξ = 0 plane, ξ planes
/// `xi_stride` floats apart.
#[derive(Clone, Copy)]
struct ChannelAt {
    offset: usize,
    xi_stride: usize,
}

impl ChannelAt {
    #[inline(always)]
    fn at(self, xi: usize, tile: usize) -> usize {
        xi * self.xi_stride + self.offset + tile
    }
}

#[inline(always)]
fn load(data: &[f32], at: usize) -> Lanes {
    data[at..at + LANES].try_into().expect("a whole lane block")
}

/// `V[ξ][c][·]` for the tiles of a block's `rows` tile rows of one input plane split into
/// phases (`channel` says where channel c's tiles lie).
// Row i of a patch gathers element i of every column: an index, not an iteration over `cols`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn input_transform<T: Transform>(
    tiling: &Tiling,
    rows: usize,
    phases: &[f32],
    v: &mut [f32],
    channel: ChannelAt,
) {
    let (m, alpha) = (T::M, T::ALPHA);
    let pw = tiling.phase_w;
    let phase_plane = (tiling.block_rows * m + 2) * pw;
    for ty in 0..rows {
        for tx0 in (0..tiling.tiles_w).step_by(LANES) {
            // Patch columns transformed vertically first (Bᵀ·d per patch column).
            let mut cols = [[[0.0f32; LANES]; 6]; 6];
            for (j, col) in cols.iter_mut().enumerate().take(alpha) {
                let base = (j % m) * phase_plane + tx0 + j / m;
                let mut d = [[0.0f32; LANES]; 6];
                for (i, row) in d.iter_mut().enumerate().take(alpha) {
                    *row = load(phases, base + (ty * m + i) * pw);
                }
                *col = T::input(&d);
            }
            // Then horizontally: row i of the patch is cols[·][i]. Lanes past the row's last
            // tile write into the next row's tiles (rewritten when that row is done) or the
            // channel's slack.
            let tile0 = ty * tiling.tiles_w + tx0;
            for i in 0..alpha {
                let row: [Lanes; 6] = std::array::from_fn(|j| cols[j][i]);
                let out = T::input(&row);
                for (j, values) in out.iter().enumerate().take(alpha) {
                    let at = channel.at(i * alpha + j, tile0);
                    v[at..at + LANES].copy_from_slice(values);
                }
            }
        }
    }
}

/// Tile rows `rows` of the output plane of channel `k` from a block's `M[ξ][k][·]` (`channel`
/// says where its tiles lie), with the bias added.
// Row i of a tile gathers element i of every column: an index, not an iteration over `cols`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn output_transform<T: Transform>(
    geom: &Conv2d,
    tiling: &Tiling,
    rows: (usize, usize),
    mm: &[f32],
    channel: ChannelAt,
    bias: f32,
    out: &mut [f32],
) {
    let (m, alpha) = (T::M, T::ALPHA);
    let mut interleaved = [0.0f32; LANES * 4];
    for ty in rows.0..rows.1 {
        for tx0 in (0..tiling.tiles_w).step_by(LANES) {
            let tile0 = (ty - rows.0) * tiling.tiles_w + tx0;
            // Aᵀ over patch rows per column j, then over columns per output row.
            let mut cols = [[[0.0f32; LANES]; 4]; 6];
            for (j, col) in cols.iter_mut().enumerate().take(alpha) {
                let mut d = [[0.0f32; LANES]; 6];
                for (i, row) in d.iter_mut().enumerate().take(alpha) {
                    *row = load(mm, channel.at(i * alpha + j, tile0));
                }
                *col = T::output(&d);
            }
            let x0 = tx0 * m;
            let width = (geom.out_w - x0).min(LANES * m);
            for i in 0..m {
                let oy = ty * m + i;
                if oy >= geom.out_h {
                    break;
                }
                let row: [Lanes; 6] = std::array::from_fn(|j| cols[j][i]);
                let y = T::output(&row);
                // Fixed interleave factor, so the stores vectorise as an interleave.
                for (l, group) in interleaved[..LANES * m].chunks_exact_mut(m).enumerate() {
                    for (j, value) in group.iter_mut().enumerate() {
                        *value = y[j][l] + bias;
                    }
                }
                // `out` holds the block's output rows only.
                let at = (oy - rows.0 * m) * geom.out_w + x0;
                let dst = &mut out[at..at + width];
                if width == LANES * m {
                    // A whole block: a fixed-size copy the compiler keeps in vector moves.
                    match m {
                        2 => dst.copy_from_slice(&interleaved[..LANES * 2]),
                        _ => dst.copy_from_slice(&interleaved[..LANES * 4]),
                    }
                } else {
                    dst.copy_from_slice(&interleaved[..width]);
                }
            }
        }
    }
}

multiversion! {
    fn input_transform_f2(geom: &Conv2d, tiling: &Tiling, rows: (usize, usize), plane: &[f32], phases: &mut [f32], v: &mut [f32], channel: ChannelAt) {
        split_phases::<F2>(geom, tiling, rows, plane, phases);
        input_transform::<F2>(tiling, rows.1 - rows.0, phases, v, channel)
    }
}

multiversion! {
    fn input_transform_f4(geom: &Conv2d, tiling: &Tiling, rows: (usize, usize), plane: &[f32], phases: &mut [f32], v: &mut [f32], channel: ChannelAt) {
        split_phases::<F4>(geom, tiling, rows, plane, phases);
        input_transform::<F4>(tiling, rows.1 - rows.0, phases, v, channel)
    }
}

multiversion! {
    fn output_transform_f2(geom: &Conv2d, tiling: &Tiling, rows: (usize, usize), mm: &[f32], channel: ChannelAt, bias: f32, out: &mut [f32]) {
        output_transform::<F2>(geom, tiling, rows, mm, channel, bias, out)
    }
}

multiversion! {
    fn output_transform_f4(geom: &Conv2d, tiling: &Tiling, rows: (usize, usize), mm: &[f32], channel: ChannelAt, bias: f32, out: &mut [f32]) {
        output_transform::<F4>(geom, tiling, rows, mm, channel, bias, out)
    }
}

/// Runs an [`eligible`] convolution as Winograd with weights transformed by
/// [`WinogradWeights::new`] for the same geometry. `scratch` holds [`scratch_len_threads`]
/// floats for `threads`.
pub fn conv2d_winograd(
    geom: &Conv2d,
    input: &[f32],
    weights: &WinogradWeights,
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    assert!(eligible(geom), "Winograd needs a 3×3 stride-1 convolution");
    let tile = weights.tile;
    let (m, alpha) = (tile.output(), tile.alpha());
    let a2 = alpha * alpha;
    let tiling = Tiling::new(geom, m);
    let stride = tiling.tile_stride;
    let (c, k) = (geom.in_channels, geom.out_channels);
    assert_eq!(weights.packed.len(), a2);
    assert!(weights.packed[0].rows() == k && weights.packed[0].cols() == c);
    let in_plane = geom.in_h * geom.in_w;
    let out_plane = geom.out_h * geom.out_w;
    assert!(input.len() >= geom.batch * c * in_plane);
    assert!(output.len() >= geom.batch * k * out_plane);
    assert!(scratch.len() >= scratch_len_threads(geom, tile, threads));
    let out_ptr = SendPtr(output.as_mut_ptr());
    // With several threads, each takes whole blocks of tile rows through all three phases on
    // its own `V` and `M` when its share still fills the GEMMs (at least `MIN_BLOCK_TILES`
    // tiles): splitting every phase instead (channels, then ξ, then output channels) hands
    // each phase's output to the other core, and on a 2-vCPU guest whose cores sit on
    // different dies the F(4×4) layers of SqueezeNet ran no faster on two threads than on one.
    if let Some(rows_per_worker) = spatial_split(&tiling, threads) {
        let split = Tiling::with_max_rows(geom, m, rows_per_worker);
        let worker_scratch = a2 * (c + k) * split.tile_stride;
        let blocks: Vec<(usize, (usize, usize))> = (0..geom.batch)
            .flat_map(|n| {
                (0..split.tiles_h)
                    .step_by(split.block_rows)
                    .map(move |ty0| (n, (ty0, (ty0 + split.block_rows).min(split.tiles_h))))
            })
            .collect();
        let workers = threads.min(blocks.len());
        assert!(scratch.len() >= workers * worker_scratch);
        let per_worker = blocks.len().div_ceil(workers);
        let scratch_ptr = SendPtr(scratch.as_mut_ptr());
        parallel_for(threads, workers, |worker| {
            // SAFETY: worker `worker` uses only its own `worker_scratch` floats of `scratch`
            // (inside it: asserted above).
            let own = unsafe {
                std::slice::from_raw_parts_mut(
                    scratch_ptr.get().add(worker * worker_scratch),
                    worker_scratch,
                )
            };
            let (v, mm) = own.split_at_mut(a2 * c * split.tile_stride);
            for &(n, rows) in blocks.iter().skip(worker * per_worker).take(per_worker) {
                let image = &input[n * c * in_plane..(n + 1) * c * in_plane];
                let residual = epilogue
                    .residual
                    .map(|r| &r[n * k * out_plane..(n + 1) * k * out_plane]);
                // SAFETY: blocks are distinct (image, tile rows) pairs, so workers write
                // disjoint output rows of `output` (whose length is asserted above).
                let out_image = SendPtr(unsafe { out_ptr.get().add(n * k * out_plane) });
                run_block(
                    geom, &split, rows, image, weights, epilogue, residual, v, mm, out_image, 1,
                );
            }
        });
        return;
    }
    let (v, mm) = scratch[..a2 * (c + k) * stride].split_at_mut(a2 * c * stride);
    for n in 0..geom.batch {
        let image = &input[n * c * in_plane..(n + 1) * c * in_plane];
        // SAFETY: image `n`'s output planes, inside `output` (asserted above).
        let out_image = SendPtr(unsafe { out_ptr.get().add(n * k * out_plane) });
        let residual = epilogue
            .residual
            .map(|r| &r[n * k * out_plane..(n + 1) * k * out_plane]);
        for ty0 in (0..tiling.tiles_h).step_by(tiling.block_rows) {
            let rows = (ty0, (ty0 + tiling.block_rows).min(tiling.tiles_h));
            run_block(
                geom, &tiling, rows, image, weights, epilogue, residual, v, mm, out_image, threads,
            );
        }
    }
}

/// One block of tile rows: input transform, α² GEMMs, output transform with the epilogue.
/// `out_image` points at the image's `K` output planes; the block writes only its own rows of
/// each, which no one else may touch meanwhile.
#[allow(clippy::too_many_arguments)]
fn run_block(
    geom: &Conv2d,
    tiling: &Tiling,
    rows: (usize, usize),
    image: &[f32],
    weights: &WinogradWeights,
    epilogue: &ConvEpilogue,
    residual: Option<&[f32]>,
    v: &mut [f32],
    mm: &mut [f32],
    out_image: SendPtr<f32>,
    threads: usize,
) {
    let tile = weights.tile;
    let (m, a2) = (tile.output(), tile.alpha() * tile.alpha());
    let (c, k) = (geom.in_channels, geom.out_channels);
    let stride = tiling.tile_stride;
    let tiles = (rows.1 - rows.0) * tiling.tiles_w;
    let in_plane = geom.in_h * geom.in_w;
    let out_plane = geom.out_h * geom.out_w;
    // Input transform, channels split across workers (each writes its channels' rows of every
    // ξ plane).
    let tasks = threads.min(c).max(1);
    let per_task = c.div_ceil(tasks);
    let v_ptr = SendPtr(v.as_mut_ptr());
    let v_len = v.len();
    parallel_for(threads, tasks, |task| {
        let mut phases = vec![0.0f32; tiling.phases_len()];
        // SAFETY: every task writes only its own channels' rows (tiles and slack) of each ξ
        // plane, disjoint from other tasks'; the slice spans the whole of `v`.
        let v = unsafe { std::slice::from_raw_parts_mut(v_ptr.get(), v_len) };
        for ic in task * per_task..((task + 1) * per_task).min(c) {
            let plane = &image[ic * in_plane..(ic + 1) * in_plane];
            let channel = ChannelAt {
                offset: ic * stride,
                xi_stride: c * stride,
            };
            match tile {
                WinogradTile::F2 => {
                    input_transform_f2(geom, tiling, rows, plane, &mut phases, v, channel)
                }
                WinogradTile::F4 => {
                    input_transform_f4(geom, tiling, rows, plane, &mut phases, v, channel)
                }
            }
        }
    });
    // α² GEMMs, split across workers by ξ.
    let v: &[f32] = v;
    let m_ptr = SendPtr(mm.as_mut_ptr());
    parallel_for(threads, a2, |xi| {
        // SAFETY: GEMM ξ writes only plane ξ of `mm`.
        let out =
            unsafe { std::slice::from_raw_parts_mut(m_ptr.get().add(xi * k * stride), k * stride) };
        let b = MatRef {
            data: &v[xi * c * stride..(xi + 1) * c * stride],
            rows: c,
            cols: tiles,
            row_stride: stride,
            col_stride: 1,
        };
        gemm::sgemm_packed_a(&weights.packed[xi], &b, out, stride, &Epilogue::NONE, 1);
    });
    // Output transform with the epilogue, output channels split across workers.
    let mm: &[f32] = mm;
    let (y0, y1) = (rows.0 * m, (rows.1 * m).min(geom.out_h));
    let tasks = threads.min(k).max(1);
    let per_task = k.div_ceil(tasks);
    parallel_for(threads, tasks, |task| {
        let (k0, k1) = (task * per_task, ((task + 1) * per_task).min(k));
        for oc in k0..k1 {
            // SAFETY: rows y0..y1 of output plane `oc`: this task's channel, this block's
            // rows (the caller's contract).
            let block = unsafe {
                std::slice::from_raw_parts_mut(
                    out_image.get().add(oc * out_plane + y0 * geom.out_w),
                    (y1 - y0) * geom.out_w,
                )
            };
            let bias = epilogue.bias.map_or(0.0, |b| b[oc]);
            let channel = ChannelAt {
                offset: oc * stride,
                xi_stride: k * stride,
            };
            match tile {
                WinogradTile::F2 => {
                    output_transform_f2(geom, tiling, rows, mm, channel, bias, block)
                }
                WinogradTile::F4 => {
                    output_transform_f4(geom, tiling, rows, mm, channel, bias, block)
                }
            }
            if let Some(res) = residual {
                let res = &res[oc * out_plane + y0 * geom.out_w..oc * out_plane + y1 * geom.out_w];
                for (o, r) in block.iter_mut().zip(res) {
                    *o += r;
                }
            }
            if epilogue.activation != Activation::None {
                gemm::apply_activation(&epilogue.activation, block);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::reference_conv;

    fn geom(c: usize, k: usize, h: usize, w: usize, pad: usize) -> Conv2d {
        Conv2d {
            batch: 2,
            in_channels: c,
            in_h: h,
            in_w: w,
            out_channels: k,
            kernel_h: 3,
            kernel_w: 3,
            stride_h: 1,
            stride_w: 1,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: pad,
            pad_left: pad,
            out_h: h + 2 * pad - 2,
            out_w: w + 2 * pad - 2,
            group: 1,
        }
    }

    /// Largest error relative to the output's scale.
    fn run(geom: Conv2d, tile: WinogradTile, ep_kind: usize, threads: usize) -> f64 {
        let input: Vec<f32> = (0..geom.batch * geom.in_channels * geom.in_h * geom.in_w)
            .map(|i| ((i * 7919) % 23) as f32 / 11.0 - 1.0)
            .collect();
        let weights: Vec<f32> = (0..geom.out_channels * geom.in_channels * 9)
            .map(|i| ((i * 104729) % 17) as f32 / 8.0 - 1.0)
            .collect();
        let bias: Vec<f32> = (0..geom.out_channels)
            .map(|i| i as f32 * 0.1 - 0.5)
            .collect();
        let out_len = geom.batch * geom.out_channels * geom.out_h * geom.out_w;
        let residual: Vec<f32> = (0..out_len).map(|i| (i % 7) as f32 * 0.25 - 0.8).collect();
        let ep = match ep_kind {
            0 => ConvEpilogue {
                bias: None,
                residual: None,
                activation: Activation::None,
            },
            1 => ConvEpilogue {
                bias: Some(&bias),
                residual: None,
                activation: Activation::Relu,
            },
            _ => ConvEpilogue {
                bias: Some(&bias),
                residual: Some(&residual),
                activation: Activation::Clip {
                    min: -1.0,
                    max: 2.0,
                },
            },
        };
        let want = reference_conv(&geom, &input, &weights, &ep);
        let packed = WinogradWeights::new(&gemm::GemmConfig::default(), &geom, tile, &weights);
        let mut got = vec![f32::NAN; out_len];
        let mut scratch = vec![f32::NAN; scratch_len_threads(&geom, tile, threads)];
        conv2d_winograd(&geom, &input, &packed, &ep, &mut got, &mut scratch, threads);
        let scale = want.iter().fold(1.0f64, |s, w| s.max(w.abs() as f64));
        got.iter()
            .zip(&want)
            .map(|(g, w)| (*g as f64 - *w as f64).abs() / scale)
            .fold(0.0, f64::max)
    }

    #[test]
    fn matches_the_reference_convolution() {
        // Planes that are and are not multiples of the tile, with and without padding, more
        // tiles per row than one lane block, every epilogue, one to three threads.
        for tile in WinogradTile::ALL {
            for (c, k, h, w, pad) in [
                (3, 5, 8, 8, 1),
                (4, 3, 7, 9, 1),
                (2, 2, 5, 40, 0),
                (16, 33, 14, 14, 1),
                (5, 7, 3, 3, 1),
                (1, 1, 3, 3, 0),
                // Enough tile rows that two and three threads each take whole blocks.
                (3, 6, 40, 40, 1),
                (4, 5, 61, 45, 1),
            ] {
                for ep in 0..3 {
                    for threads in [1, 2, 3] {
                        let err = run(geom(c, k, h, w, pad), tile, ep, threads);
                        let tol = match tile {
                            WinogradTile::F2 => 2e-6,
                            WinogradTile::F4 => 5e-5,
                        };
                        assert!(
                            err < tol,
                            "{tile:?} c{c} k{k} {h}x{w} pad {pad} ep {ep} t{threads}: {err}"
                        );
                    }
                }
            }
            // The last two shapes do take the split path on two threads, the first not.
            let split = |h, w| {
                let g = geom(3, 6, h, w, 1);
                spatial_split(&Tiling::new(&g, tile.output()), 2).is_some()
            };
            assert!(split(61, 45) && !split(8, 8));
        }
    }

    #[test]
    fn filter_transform_of_a_delta_is_the_interpolation_column() {
        // g = δ at the centre: G·g is G's middle column, so U = col·colᵀ.
        let mut g = [0.0f32; 9];
        g[4] = 1.0;
        let u = filter_transform(WinogradTile::F2, &g);
        let col = [0.0f32, 0.5, -0.5, 0.0];
        for i in 0..4 {
            for j in 0..4 {
                assert_eq!(u[i * 4 + j], col[i] * col[j]);
            }
        }
    }

    #[test]
    fn work_counts_tiles_and_multiplies() {
        let g = geom(64, 64, 56, 56, 1);
        let f4 = work(&g, WinogradTile::F4);
        assert_eq!(f4.tiles, 14 * 14);
        assert_eq!(f4.gemm_macs, 36 * 64 * 64 * 196);
        assert_eq!(f4.weight_bytes, 4 * 36 * 64 * 64);
        let f2 = work(&g, WinogradTile::F2);
        assert_eq!(f2.tiles, 28 * 28);
        assert_eq!(f2.gemm_macs, 16 * 64 * 64 * 784);
        // Direct does 9·56² = 28,224 MACs per channel pair; F(4×4) 7,056, F(2×2) 12,544.
        assert_eq!(64 * 64 * 9 * 56 * 56 / f4.gemm_macs as usize, 4);
    }
}
