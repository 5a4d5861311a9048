//! Geometry of a 2-D convolution: `Conv2d` (shape, scratch, FLOPs, the GEMM shape it runs as),
//! `ConvEpilogue` (bias, residual, activation in NCHW terms) and the choice between the
//! channel-major and pixel-major GEMM layouts. A leaf: the im2col/GEMM convolution (`conv`) and
//! the direct depthwise kernel (`conv::depthwise`) both build on it without naming each other.

use crate::kernels::gemm::{self, Activation};

/// Geometry of one 2-D convolution (1-D convolutions use `h = kh = 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub batch: usize,
    pub in_channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_channels: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub dilation_h: usize,
    pub dilation_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub group: usize,
}

impl Conv2d {
    /// The same convolution with a one-column image turned into a one-row image: `[C, H, 1]`
    /// and `[C, 1, H]` are the same memory, as are `kh × 1` and `1 × kh` kernels, and the
    /// kernels gather and tile along rows (1-D convolutions exported as `H × 1` ran im2col
    /// one element per row: magika's 5×1 convolution at 61% of the fp32 peak instead of 85%).
    /// Unchanged unless every column-side parameter is trivial.
    pub fn with_column_as_row(self) -> Conv2d {
        if !(self.in_w == 1
            && self.out_w == 1
            && self.kernel_w == 1
            && self.pad_left == 0
            && self.in_h > 1)
        {
            return self;
        }
        Conv2d {
            in_h: 1,
            in_w: self.in_h,
            kernel_h: 1,
            kernel_w: self.kernel_h,
            stride_h: 1,
            stride_w: self.stride_h,
            dilation_h: 1,
            dilation_w: self.dilation_h,
            pad_top: 0,
            pad_left: self.pad_top,
            out_h: 1,
            out_w: self.out_h,
            ..self
        }
    }

    /// A 3×3 kernel with no dilation (the shape the 3×3 row kernels are written for).
    pub fn is_dense_3x3(&self) -> bool {
        self.kernel_h == 3 && self.kernel_w == 3 && self.dilation_h == 1 && self.dilation_w == 1
    }

    pub fn is_depthwise(&self) -> bool {
        self.group == self.in_channels && self.group == self.out_channels && self.group > 1
    }

    pub fn is_pointwise(&self) -> bool {
        self.kernel_h == 1
            && self.kernel_w == 1
            && self.stride_h == 1
            && self.stride_w == 1
            && self.pad_top == 0
            && self.pad_left == 0
            && self.out_h == self.in_h
            && self.out_w == self.in_w
    }

    /// Scratch floats the convolution needs: for the GEMM path the im2col columns (none for
    /// pointwise) and, when some GEMM variant computes this convolution pixel-major, the
    /// transposed output of one group; for the direct kernel its phase planes. 0 for depthwise.
    pub fn scratch_len(&self) -> usize {
        if self.is_depthwise() {
            return 0;
        }
        let gemm = self.im2col_len()
            + if self.any_pixel_major() {
                self.transposed_len()
            } else {
                0
            };
        // Whichever path the ISA picks runs with this scratch (the direct kernel's phase planes).
        gemm.max(super::direct::scratch_len(self))
    }

    /// `(m, n, k)` of the GEMM one image and group runs as on `isa` (pixel-major convolutions
    /// run `pixels × channels`): the shape to tune the blocking for.
    pub fn gemm_shape(&self, isa: gemm::Isa) -> (usize, usize, usize) {
        let channels = self.out_channels / self.group;
        let pixels = self.out_h * self.out_w;
        let taps = self.in_channels / self.group * self.kernel_h * self.kernel_w;
        match gemm_layout(isa, self) {
            GemmLayout::ChannelMajor => (channels, pixels, taps),
            GemmLayout::PixelMajor => (pixels, channels, taps),
        }
    }

    /// Whether some GEMM variant runs this convolution pixel-major.
    fn any_pixel_major(&self) -> bool {
        gemm::Isa::ALL
            .iter()
            .any(|&isa| gemm_layout(isa, self) == GemmLayout::PixelMajor)
    }

    /// Floats of explicit im2col: only the pixel-major path writes the matrix out (the
    /// channel-major GEMM packs it block by block straight from the image).
    pub(super) fn im2col_len(&self) -> usize {
        if self.is_pointwise() || !self.any_pixel_major() {
            0
        } else {
            (self.in_channels / self.group)
                * self.kernel_h
                * self.kernel_w
                * self.out_h
                * self.out_w
        }
    }

    fn transposed_len(&self) -> usize {
        self.out_channels / self.group * self.out_h * self.out_w
    }

    pub fn flops(&self) -> u64 {
        2 * (self.batch
            * self.out_channels
            * self.out_h
            * self.out_w
            * (self.in_channels / self.group)
            * self.kernel_h
            * self.kernel_w) as u64
    }
}

/// Epilogue of a convolution in NCHW terms.
#[derive(Clone, Copy, Debug)]
pub struct ConvEpilogue<'a> {
    pub bias: Option<&'a [f32]>,
    /// Tensor added after the bias, same shape as the output.
    pub residual: Option<&'a [f32]>,
    pub activation: Activation,
}

/// How a convolution is put as a GEMM (per image and group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GemmLayout {
    /// `Y[out_ch × pixels] = W · cols`: written straight into the NCHW output.
    ChannelMajor,
    /// `Yᵀ[pixels × out_ch] = colsᵀ · Wᵀ`, then transposed into the output with the residual and
    /// activation. For small planes: 49 pixels fill 64 columns of 32-wide tiles (77%) but 52 rows
    /// of 12-row tiles (94%).
    PixelMajor,
}

/// Whether the pixel-major GEMM (`Yᵀ = Xᵀ·Wᵀ`) of `geom` computes no more than the
/// channel-major one once it skips its transpose back (the plan's NHWC pairs): with the
/// transpose gone, the tiles' waste alone decides. PP-OCR's classifier has 1×1 layers of 104
/// and 200 channels on 288 and 192 pixels: 32-wide column tiles compute 128 and 224 channels
/// there, more than the transposes saved (1 thread, Zen 4, alternated: the model 1.4% slower
/// with those pairs).
pub fn pixel_major_fits(isa: gemm::Isa, geom: &Conv2d) -> bool {
    let channels = geom.out_channels / geom.group;
    let pixels = geom.out_h * geom.out_w;
    isa.computed_work(pixels, channels) <= isa.computed_work(channels, pixels)
}

/// The layout whose microkernel tiles waste less; pixel-major needs a clear saving (10%)
/// to pay for its transpose pass over the output.
pub(super) fn gemm_layout(isa: gemm::Isa, geom: &Conv2d) -> GemmLayout {
    let channels = geom.out_channels / geom.group;
    let pixels = geom.out_h * geom.out_w;
    let direct = isa.computed_work(channels, pixels);
    let transposed = isa.computed_work(pixels, channels);
    if transposed * 10 < direct * 9 {
        GemmLayout::PixelMajor
    } else {
        GemmLayout::ChannelMajor
    }
}
