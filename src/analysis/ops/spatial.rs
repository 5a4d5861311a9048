//! Sliding-window geometry shared by Conv, ConvTranspose and the pooling ops: kernel, strides,
//! dilations, explicit pads or `auto_pad`, and `ceil_mode`.

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

fn positive(values: Option<&[i64]>, count: usize, what: &str) -> OpResult<Vec<u64>> {
    match values {
        None => Ok(vec![1; count]),
        Some(values) if values.len() == count && values.iter().all(|&v| v >= 1) => {
            Ok(values.iter().map(|&v| v as u64).collect())
        }
        Some(values) => Err(super::invalid(format!(
            "{what} {values:?} must hold {count} positive values"
        ))),
    }
}

/// Output size of a forward window (conv or pool) per spatial dim.
pub fn forward_window(
    attrs: &Attributes,
    input: &[u64],
    kernel: &[u64],
    ceil_mode: bool,
) -> OpResult<Window> {
    let count = input.len();
    if kernel.len() != count {
        return Err(super::invalid(format!(
            "kernel has {} spatial dims but the input has {count}",
            kernel.len()
        )));
    }
    let strides = positive(attrs.ints("strides"), count, "strides")?;
    let dilations = positive(attrs.ints("dilations"), count, "dilations")?;
    let auto_pad = attrs.string("auto_pad").unwrap_or("NOTSET");
    let mut pads = vec![0u64; 2 * count];
    let mut output = Vec::with_capacity(count);
    for axis in 0..count {
        let extent = dilations[axis] * (kernel[axis] - 1) + 1;
        let out = match auto_pad {
            "SAME_UPPER" | "SAME_LOWER" => {
                let out = input[axis].div_ceil(strides[axis]);
                let needed = ((out - 1) * strides[axis] + extent).saturating_sub(input[axis]);
                let (small, large) = (needed / 2, needed - needed / 2);
                if auto_pad == "SAME_UPPER" {
                    pads[axis] = small;
                    pads[axis + count] = large;
                } else {
                    pads[axis] = large;
                    pads[axis + count] = small;
                }
                out
            }
            "VALID" => {
                if input[axis] < extent {
                    return Err(super::invalid(format!(
                        "window extent {extent} exceeds input size {} on spatial axis {axis}",
                        input[axis]
                    )));
                }
                (input[axis] - extent) / strides[axis] + 1
            }
            "NOTSET" | "" => {
                if let Some(explicit) = attrs.ints("pads") {
                    if explicit.len() != 2 * count || explicit.iter().any(|&p| p < 0) {
                        return Err(super::invalid(format!(
                            "pads {explicit:?} must hold {} non-negative values",
                            2 * count
                        )));
                    }
                    pads[axis] = explicit[axis] as u64;
                    pads[axis + count] = explicit[axis + count] as u64;
                }
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
            other => return Err(super::invalid(format!("unknown auto_pad `{other}`"))),
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

    #[test]
    fn resnet_stem_conv_is_112() {
        let a = attrs(&[
            ("strides", Attr::Ints(vec![2, 2])),
            ("pads", Attr::Ints(vec![3, 3, 3, 3])),
        ]);
        let w = forward_window(&a, &[224, 224], &[7, 7], false).unwrap();
        assert_eq!(w.output, vec![112, 112]);
    }

    #[test]
    fn same_upper_and_ceil_mode() {
        let a = attrs(&[
            ("strides", Attr::Ints(vec![2])),
            ("auto_pad", Attr::String("SAME_UPPER".into())),
        ]);
        let w = forward_window(&a, &[7], &[3], false).unwrap();
        assert_eq!(w.output, vec![4]);
        assert_eq!(w.pads, vec![1, 1]);
        // GoogLeNet-style pooling: 3x3 stride 2 on 112 with ceil_mode gives 56.
        let a = attrs(&[("strides", Attr::Ints(vec![2]))]);
        assert_eq!(
            forward_window(&a, &[112], &[3], true).unwrap().output,
            vec![56]
        );
        assert_eq!(
            forward_window(&a, &[112], &[3], false).unwrap().output,
            vec![55]
        );
    }

    #[test]
    fn dilation_widens_the_window() {
        let a = attrs(&[("dilations", Attr::Ints(vec![2]))]);
        assert_eq!(
            forward_window(&a, &[10], &[3], false).unwrap().output,
            vec![6]
        );
    }
}
