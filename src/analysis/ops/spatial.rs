//! Sliding-window ops' attributes, parsed once into typed configs that shape inference, cost,
//! the executor's lowering and the passes share: `ConvConfig` (Conv and the tool's fused and
//! quantized convolutions), `ConvTransposeConfig` and `PoolConfig` (MaxPool, AveragePool,
//! LpPool). Each resolves, for given input dims, to a `Window`: kernel, strides, dilations,
//! pads and output size, with `auto_pad` and `ceil_mode` applied. Before these types the
//! attributes were read in five places, and the ConvTranspose kernel ignored the `auto_pad` and
//! `output_shape` that inference honoured.

use super::OpResult;
use crate::analysis::graph::Attributes;

/// Resolved geometry for `spatial` dims.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub kernel: Vec<u64>,
    pub strides: Vec<u64>,
    pub dilations: Vec<u64>,
    /// Begin pads, then end pads (ONNX layout).
    pub pads: Vec<u64>,
    pub output: Vec<u64>,
}

/// A window as the 2-D kernels take it: `[height, width]` pairs, a 1-D window being a 2-D one
/// of height 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window2d {
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub pads_begin: [usize; 2],
    pub pads_end: [usize; 2],
    pub output: [usize; 2],
}

impl Window {
    /// The 2-D form of a 1-D or 2-D window; None for more spatial dims.
    pub fn to_2d(&self) -> Option<Window2d> {
        let count = self.kernel.len();
        let pair = |values: &[u64], fill: u64| -> [usize; 2] {
            match values {
                [w] => [fill as usize, *w as usize],
                [h, w] => [*h as usize, *w as usize],
                _ => [0, 0],
            }
        };
        if !(1..=2).contains(&count) {
            return None;
        }
        Some(Window2d {
            kernel: pair(&self.kernel, 1),
            strides: pair(&self.strides, 1),
            dilations: pair(&self.dilations, 1),
            pads_begin: pair(&self.pads[..count], 0),
            pads_end: pair(&self.pads[count..], 0),
            output: pair(&self.output, 1),
        })
    }
}

/// ONNX `auto_pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

impl AutoPad {
    fn parse(attrs: &Attributes) -> OpResult<AutoPad> {
        match attrs.string("auto_pad").unwrap_or("NOTSET") {
            "NOTSET" | "" => Ok(AutoPad::NotSet),
            "SAME_UPPER" => Ok(AutoPad::SameUpper),
            "SAME_LOWER" => Ok(AutoPad::SameLower),
            "VALID" => Ok(AutoPad::Valid),
            other => Err(super::invalid(format!("unknown auto_pad `{other}`"))),
        }
    }

    /// Splits a total padding between begin and end: SAME_UPPER puts the odd one at the end,
    /// the others at the beginning (the spec's formula, with floor division: a transposed
    /// convolution asked for more output than it scatters has a negative total, and the ONNX
    /// reference then grows the end).
    fn split(self, total: i64) -> (i64, i64) {
        let small = total.div_euclid(2);
        let large = total - small;
        match self {
            AutoPad::SameUpper => (small, large),
            _ => (large, small),
        }
    }
}

/// An integer-list attribute whose values must all be at least `min`.
fn list_at_least(attrs: &Attributes, name: &str, min: i64) -> OpResult<Option<Vec<u64>>> {
    match attrs.ints(name) {
        None => Ok(None),
        Some(values) if values.iter().all(|&v| v >= min) => {
            Ok(Some(values.iter().map(|&v| v as u64).collect()))
        }
        Some(values) => Err(super::invalid(format!(
            "{name} {values:?} must all be at least {min}"
        ))),
    }
}

/// `values` for `count` axes, or `default` on every axis when the attribute is absent.
fn per_axis(
    values: &Option<Vec<u64>>,
    count: usize,
    default: u64,
    what: &str,
) -> OpResult<Vec<u64>> {
    match values {
        None => Ok(vec![default; count]),
        Some(values) if values.len() == count => Ok(values.clone()),
        Some(values) => Err(super::invalid(format!(
            "{what} {values:?} must hold {count} values"
        ))),
    }
}

/// A kernel of `count` spatial dims, or invalid input.
fn same_rank(kernel: &[u64], count: usize) -> OpResult<()> {
    if kernel.len() == count {
        return Ok(());
    }
    Err(super::invalid(format!(
        "kernel has {} spatial dims but the input has {count}",
        kernel.len()
    )))
}

/// The window attributes convolutions and pools share, as the node gives them; their lengths
/// are checked against the input's spatial rank when resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowAttrs {
    pub kernel_shape: Option<Vec<u64>>,
    pub strides: Option<Vec<u64>>,
    pub dilations: Option<Vec<u64>>,
    /// Explicit pads (begin pads, then end pads), used when `auto_pad` is NOTSET.
    pub pads: Option<Vec<u64>>,
    pub auto_pad: AutoPad,
}

impl WindowAttrs {
    pub fn parse(attrs: &Attributes) -> OpResult<WindowAttrs> {
        Ok(WindowAttrs {
            kernel_shape: list_at_least(attrs, "kernel_shape", 1)?,
            strides: list_at_least(attrs, "strides", 1)?,
            dilations: list_at_least(attrs, "dilations", 1)?,
            pads: list_at_least(attrs, "pads", 0)?,
            auto_pad: AutoPad::parse(attrs)?,
        })
    }

    /// The kernel's spatial dims: `kernel_shape` when given, else `from_weight`.
    pub fn kernel_or(
        &self,
        from_weight: impl FnOnce() -> OpResult<Vec<u64>>,
    ) -> OpResult<Vec<u64>> {
        match &self.kernel_shape {
            Some(kernel) => Ok(kernel.clone()),
            None => from_weight(),
        }
    }

    /// The window of a forward convolution or pool over `input` (spatial dims).
    pub fn forward(&self, input: &[u64], kernel: &[u64], ceil_mode: bool) -> OpResult<Window> {
        let count = input.len();
        same_rank(kernel, count)?;
        let strides = per_axis(&self.strides, count, 1, "strides")?;
        let dilations = per_axis(&self.dilations, count, 1, "dilations")?;
        let explicit = per_axis(&self.pads, 2 * count, 0, "pads")?;
        let mut pads = vec![0u64; 2 * count];
        let mut output = Vec::with_capacity(count);
        for axis in 0..count {
            let extent = dilations[axis] * (kernel[axis] - 1) + 1;
            let out = match self.auto_pad {
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let out = input[axis].div_ceil(strides[axis]);
                    let needed = ((out - 1) * strides[axis] + extent).saturating_sub(input[axis]);
                    let (begin, end) = self.auto_pad.split(needed as i64);
                    (pads[axis], pads[axis + count]) = (begin as u64, end as u64);
                    out
                }
                AutoPad::Valid => {
                    if input[axis] < extent {
                        return Err(super::invalid(format!(
                            "window extent {extent} exceeds input size {} on spatial axis {axis}",
                            input[axis]
                        )));
                    }
                    (input[axis] - extent) / strides[axis] + 1
                }
                AutoPad::NotSet => {
                    pads[axis] = explicit[axis];
                    pads[axis + count] = explicit[axis + count];
                    let padded = input[axis] + pads[axis] + pads[axis + count];
                    if padded < extent {
                        return Err(super::invalid(format!(
                            "window extent {extent} exceeds padded input size {padded} on spatial axis {axis}"
                        )));
                    }
                    let span = padded - extent;
                    if ceil_mode {
                        let mut out = span.div_ceil(strides[axis]) + 1;
                        // The last window must start inside the input or its left padding.
                        if (out - 1) * strides[axis] >= input[axis] + pads[axis] {
                            out -= 1;
                        }
                        out
                    } else {
                        span / strides[axis] + 1
                    }
                }
            };
            output.push(out);
        }
        Ok(Window {
            kernel: kernel.to_vec(),
            strides,
            dilations,
            pads,
            output,
        })
    }
}

fn group_of(attrs: &Attributes) -> OpResult<u64> {
    match attrs.int_or("group", 1) {
        group if group >= 1 => Ok(group as u64),
        group => Err(super::invalid(format!("group {group} must be at least 1"))),
    }
}

/// Conv's attributes (also those of the tool's FusedConv, QConv and HalfConv, which keep them).
#[derive(Clone, Debug, PartialEq)]
pub struct ConvConfig {
    pub group: u64,
    pub window: WindowAttrs,
}

impl ConvConfig {
    pub fn parse(attrs: &Attributes) -> OpResult<ConvConfig> {
        Ok(ConvConfig {
            group: group_of(attrs)?,
            window: WindowAttrs::parse(attrs)?,
        })
    }

    /// The window over `input` (spatial dims) for a weight whose spatial dims are `weight`; a
    /// `kernel_shape` that contradicts the weight is an inconsistent model (a kernel would read
    /// the weights with the wrong stride).
    pub fn window(&self, input: &[u64], weight: &[u64]) -> OpResult<Window> {
        if let Some(kernel) = &self.window.kernel_shape {
            if kernel.as_slice() != weight {
                return Err(super::invalid(format!(
                    "kernel_shape {kernel:?} contradicts the weight's spatial dims {weight:?}"
                )));
            }
        }
        self.window.forward(input, weight, false)
    }
}

/// ConvTranspose's attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvTransposeConfig {
    pub group: u64,
    pub window: WindowAttrs,
    pub output_padding: Option<Vec<u64>>,
    /// Requested output spatial size (its last dims are the spatial ones).
    pub output_shape: Option<Vec<u64>>,
}

impl ConvTransposeConfig {
    pub fn parse(attrs: &Attributes) -> OpResult<ConvTransposeConfig> {
        Ok(ConvTransposeConfig {
            group: group_of(attrs)?,
            window: WindowAttrs::parse(attrs)?,
            output_padding: list_at_least(attrs, "output_padding", 0)?,
            output_shape: list_at_least(attrs, "output_shape", 0)?,
        })
    }

    /// The window over `input` (spatial dims): pads as given, or derived from `output_shape`
    /// or a SAME `auto_pad` as the spec states (total padding = stride·(in−1) +
    /// output_padding + dilation·(k−1) + 1 − out, split by `auto_pad`). `output` is the
    /// transposed op's output size, `pads` what is cropped from the full scatter; an output
    /// longer than the scatter has a negative end pad, stored as 0 (the output size says it).
    pub fn window(&self, input: &[u64], kernel: &[u64]) -> OpResult<Window> {
        let count = input.len();
        same_rank(kernel, count)?;
        let strides = per_axis(&self.window.strides, count, 1, "strides")?;
        let dilations = per_axis(&self.window.dilations, count, 1, "dilations")?;
        let output_padding = per_axis(&self.output_padding, count, 0, "output_padding")?;
        let explicit = per_axis(&self.window.pads, 2 * count, 0, "pads")?;
        let requested: Option<Vec<u64>> = match (&self.output_shape, self.window.auto_pad) {
            (Some(shape), _) if shape.len() >= count => Some(shape[shape.len() - count..].to_vec()),
            (Some(shape), _) => {
                return Err(super::invalid(format!(
                    "output_shape {shape:?} has fewer than {count} spatial dims"
                )))
            }
            (None, AutoPad::SameUpper | AutoPad::SameLower) => {
                Some(input.iter().zip(&strides).map(|(i, s)| i * s).collect())
            }
            (None, _) => None,
        };
        let mut pads = vec![0u64; 2 * count];
        let mut output = Vec::with_capacity(count);
        for axis in 0..count {
            let full = strides[axis] * (input[axis].max(1) - 1)
                + output_padding[axis]
                + (kernel[axis] - 1) * dilations[axis]
                + 1;
            let out = match &requested {
                Some(requested) => {
                    let out = requested[axis];
                    let (begin, end) = self.window.auto_pad.split(full as i64 - out as i64);
                    if begin < 0 {
                        // Not inconsistent, but no kernel shifts its output that way.
                        return Err(format!(
                            "output size {out} starts {} before the first scattered element on spatial axis {axis} (unsupported)",
                            -begin
                        ));
                    }
                    (pads[axis], pads[axis + count]) = (begin as u64, end.max(0) as u64);
                    out
                }
                None => {
                    pads[axis] = explicit[axis];
                    pads[axis + count] = explicit[axis + count];
                    full.checked_sub(pads[axis] + pads[axis + count])
                        .filter(|&out| out > 0)
                        .ok_or_else(|| {
                            super::invalid(format!(
                                "pads exceed the output size on spatial axis {axis}"
                            ))
                        })?
                }
            };
            output.push(out);
        }
        Ok(Window {
            kernel: kernel.to_vec(),
            strides,
            dilations,
            pads,
            output,
        })
    }
}

/// MaxPool's, AveragePool's and LpPool's attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    pub kernel: Vec<u64>,
    pub window: WindowAttrs,
    pub ceil_mode: bool,
    /// AveragePool: padded taps count in the divisor.
    pub count_include_pad: bool,
}

impl PoolConfig {
    pub fn parse(attrs: &Attributes) -> OpResult<PoolConfig> {
        let window = WindowAttrs::parse(attrs)?;
        let kernel = window
            .kernel_shape
            .clone()
            .ok_or_else(|| super::invalid("missing `kernel_shape` attribute"))?;
        Ok(PoolConfig {
            kernel,
            window,
            ceil_mode: attrs.int_or("ceil_mode", 0) != 0,
            count_include_pad: attrs.int_or("count_include_pad", 0) != 0,
        })
    }

    /// The window over `input` (spatial dims).
    pub fn window(&self, input: &[u64]) -> OpResult<Window> {
        self.window.forward(input, &self.kernel, self.ceil_mode)
    }

    /// Taps per window.
    pub fn taps(&self) -> u64 {
        self.kernel.iter().product()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::Attr;

    fn attrs(items: &[(&str, Attr)]) -> Attributes {
        let mut a = Attributes::default();
        for (k, v) in items {
            a.0.insert(k.to_string(), v.clone());
        }
        a
    }

    fn forward(a: &Attributes, input: &[u64], kernel: &[u64], ceil: bool) -> OpResult<Window> {
        WindowAttrs::parse(a)?.forward(input, kernel, ceil)
    }

    #[test]
    fn resnet_stem_conv_is_112() {
        let a = attrs(&[
            ("strides", Attr::Ints(vec![2, 2])),
            ("pads", Attr::Ints(vec![3, 3, 3, 3])),
        ]);
        let config = ConvConfig::parse(&a).unwrap();
        let w = config.window(&[224, 224], &[7, 7]).unwrap();
        assert_eq!(w.output, vec![112, 112]);
        let flat = w.to_2d().unwrap();
        assert_eq!(flat.pads_begin, [3, 3]);
        assert_eq!(flat.output, [112, 112]);
    }

    #[test]
    fn same_upper_and_ceil_mode() {
        let a = attrs(&[
            ("strides", Attr::Ints(vec![2])),
            ("auto_pad", Attr::String("SAME_UPPER".into())),
        ]);
        let w = forward(&a, &[7], &[3], false).unwrap();
        assert_eq!(w.output, vec![4]);
        assert_eq!(w.pads, vec![1, 1]);
        // GoogLeNet-style pooling: 3x3 stride 2 on 112 with ceil_mode gives 56.
        let a = attrs(&[("strides", Attr::Ints(vec![2]))]);
        assert_eq!(forward(&a, &[112], &[3], true).unwrap().output, vec![56]);
        assert_eq!(forward(&a, &[112], &[3], false).unwrap().output, vec![55]);
    }

    #[test]
    fn same_lower_puts_the_odd_pad_first() {
        // Input 6, kernel 4, stride 1: 3 pads in all, SAME_UPPER 1 + 2, SAME_LOWER 2 + 1.
        for (mode, pads) in [("SAME_UPPER", vec![1, 2]), ("SAME_LOWER", vec![2, 1])] {
            let a = attrs(&[("auto_pad", Attr::String(mode.into()))]);
            let w = forward(&a, &[6], &[4], false).unwrap();
            assert_eq!(
                (w.output.clone(), w.pads.clone()),
                (vec![6], pads),
                "{mode}"
            );
        }
    }

    #[test]
    fn dilation_widens_the_window() {
        let a = attrs(&[("dilations", Attr::Ints(vec![2]))]);
        assert_eq!(forward(&a, &[10], &[3], false).unwrap().output, vec![6]);
    }

    #[test]
    fn bad_attributes_are_invalid_input() {
        for bad in [
            attrs(&[("strides", Attr::Ints(vec![0]))]),
            attrs(&[("pads", Attr::Ints(vec![-1, 0]))]),
            attrs(&[("auto_pad", Attr::String("SAME".into()))]),
            attrs(&[("group", Attr::Int(0))]),
        ] {
            let err = ConvConfig::parse(&bad).unwrap_err();
            assert!(crate::analysis::ops::as_invalid(&err).is_some(), "{err}");
        }
        // Lengths are checked against the input's rank.
        let two = attrs(&[("strides", Attr::Ints(vec![2, 2]))]);
        assert!(forward(&two, &[10], &[3], false).is_err());
        let pool = PoolConfig::parse(&attrs(&[])).unwrap_err();
        assert!(pool.contains("kernel_shape"), "{pool}");
    }

    #[test]
    fn conv_kernel_is_the_weight_and_kernel_shape_must_agree() {
        let config = ConvConfig::parse(&attrs(&[])).unwrap();
        assert_eq!(config.window(&[10], &[3]).unwrap().output, vec![8]);
        let given = ConvConfig::parse(&attrs(&[("kernel_shape", Attr::Ints(vec![3]))])).unwrap();
        assert_eq!(given.window(&[10], &[3]).unwrap().output, vec![8]);
        let contradicting = given.window(&[10], &[5]).unwrap_err();
        assert!(crate::analysis::ops::as_invalid(&contradicting).is_some());
        // Without the weight's dims (symbolic), `kernel_shape` alone gives the window.
        let kernel = given
            .window
            .kernel_or(|| Err("weight dims unknown".into()))
            .unwrap();
        assert_eq!(kernel, vec![3]);
    }

    /// Input 3, kernel 3, stride 2: the full scatter is 2·(3−1) + (3−1) + 1 = 7 long.
    #[test]
    fn conv_transpose_output_and_crop() {
        let transpose = |items: &[(&str, Attr)]| {
            let mut all = vec![("strides", Attr::Ints(vec![2]))];
            all.extend(items.iter().cloned());
            ConvTransposeConfig::parse(&attrs(&all))
                .unwrap()
                .window(&[3], &[3])
                .unwrap()
        };
        let plain = transpose(&[]);
        assert_eq!((plain.output, plain.pads), (vec![7], vec![0, 0]));
        let padded = transpose(&[("pads", Attr::Ints(vec![1, 1]))]);
        assert_eq!((padded.output, padded.pads), (vec![5], vec![1, 1]));
        // SAME: output = input · stride = 6, one cropped: at the end (UPPER), the start (LOWER).
        let upper = transpose(&[("auto_pad", Attr::String("SAME_UPPER".into()))]);
        assert_eq!((upper.output, upper.pads), (vec![6], vec![0, 1]));
        let lower = transpose(&[("auto_pad", Attr::String("SAME_LOWER".into()))]);
        assert_eq!((lower.output, lower.pads), (vec![6], vec![1, 0]));
        // output_shape 8 with output_padding 1: the full scatter is 8, nothing cropped.
        let shaped = transpose(&[
            ("output_padding", Attr::Ints(vec![1])),
            ("output_shape", Attr::Ints(vec![8])),
        ]);
        assert_eq!((shaped.output, shaped.pads), (vec![8], vec![0, 0]));
        // output_shape 8, NOTSET: one more than the scatter, the zero row at the end (as in
        // ONNX's convtranspose_output_shape case).
        let longer = transpose(&[("output_shape", Attr::Ints(vec![8]))]);
        assert_eq!((longer.output, longer.pads), (vec![8], vec![0, 0]));
        // output_shape 5, NOTSET: 2 cropped, one at each end.
        let cropped = transpose(&[("output_shape", Attr::Ints(vec![5]))]);
        assert_eq!((cropped.output, cropped.pads), (vec![5], vec![1, 1]));
        let too_big = ConvTransposeConfig::parse(&attrs(&[("output_shape", Attr::Ints(vec![9]))]))
            .unwrap()
            .window(&[3], &[3]);
        assert!(too_big.is_err());
    }

    #[test]
    fn pool_config_counts_taps() {
        let a = attrs(&[
            ("kernel_shape", Attr::Ints(vec![3, 3])),
            ("strides", Attr::Ints(vec![2, 2])),
            ("count_include_pad", Attr::Int(1)),
        ]);
        let pool = PoolConfig::parse(&a).unwrap();
        assert_eq!(pool.taps(), 9);
        assert!(pool.count_include_pad && !pool.ceil_mode);
        assert_eq!(pool.window(&[112, 112]).unwrap().output, vec![55, 55]);
    }
}
