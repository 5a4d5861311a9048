//! Classical-ML and featurisation ops (shapes and costs in `analysis/ops/classic_ml.rs`):
//! Binarizer and ArrayFeatureExtractor (`ai.onnx.ml`), TfIdfVectorizer over integer tokens, and
//! MaxUnpool.

use std::collections::HashMap;

use super::{floats, ints, Result};
use crate::analysis::graph::Node;
use crate::analysis::ops::classic_ml::max_unpool_dims;
use crate::exec::{RtData, RtTensor};

/// Binarizer: 1 where the value exceeds `threshold`, else 0.
pub(super) fn binarizer(node: &Node, x: &RtTensor) -> RtTensor {
    let threshold = node.attrs.float_or("threshold", 0.0);
    RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(
            floats(x)
                .iter()
                .map(|&v| if v > threshold { 1.0 } else { 0.0 })
                .collect(),
        ),
    }
}

/// ArrayFeatureExtractor: the elements at `indices` along the last axis (a vector is one row).
pub(super) fn array_feature_extractor(x: &RtTensor, indices: &RtTensor) -> Result<RtTensor> {
    let picks = ints(indices);
    let features = *x.shape.last().ok_or("a scalar has no features")?;
    let rows = x.len() / features.max(1);
    let mut sources = Vec::with_capacity(rows * picks.len());
    for row in 0..rows {
        for &p in &picks {
            let p = usize::try_from(p)
                .ok()
                .filter(|&p| p < features)
                .ok_or_else(|| format!("index {p} outside {features} features"))?;
            sources.push(row * features + p);
        }
    }
    let mut shape = if x.shape.len() == 1 {
        vec![1]
    } else {
        x.shape[..x.shape.len() - 1].to_vec()
    };
    shape.push(picks.len());
    Ok(super::select(x, shape, &sources))
}

/// TfIdfVectorizer over integer tokens: per row, the count of every pool n-gram found with each
/// skip (unigrams once), then weighted as `mode` says.
pub(super) fn tfidf_vectorizer(node: &Node, x: &RtTensor) -> Result<RtTensor> {
    let attrs = &node.attrs;
    let pool = attrs
        .ints("pool_int64s")
        .ok_or("only integer n-gram pools (pool_int64s) are supported")?;
    let starts = attrs.ints("ngram_counts").ok_or("missing ngram_counts")?;
    let indexes = attrs.ints("ngram_indexes").ok_or("missing ngram_indexes")?;
    let (min_gram, max_gram) = (
        attrs.int_or("min_gram_length", 1).max(1) as usize,
        attrs.int_or("max_gram_length", 1).max(1) as usize,
    );
    let max_skip = attrs.int_or("max_skip_count", 0).max(0) as usize;
    let width = indexes.iter().copied().max().map_or(0, |m| m + 1) as usize;
    let weights = attrs.floats("weights");
    // Pool n-grams of each length → their output index.
    let mut lookup: HashMap<Vec<i64>, usize> = HashMap::new();
    let mut ordinal = 0usize;
    for (group, &start) in starts.iter().enumerate() {
        let length = group + 1;
        let end = starts.get(group + 1).copied().unwrap_or(pool.len() as i64);
        let (start, end) = (start.max(0) as usize, (end.max(0) as usize).min(pool.len()));
        for gram in pool[start.min(end)..end].chunks_exact(length) {
            let index = *indexes
                .get(ordinal)
                .ok_or("fewer ngram_indexes than pool n-grams")?;
            lookup.insert(gram.to_vec(), index as usize);
            ordinal += 1;
        }
    }
    let tokens = ints(x);
    let (rows, length) = match x.shape[..] {
        [n] => (1, n),
        [rows, n] => (rows, n),
        _ => return Err(format!("input {:?} is not 1-D or 2-D", x.shape)),
    };
    let mut out = vec![0f32; rows * width];
    for row in 0..rows {
        let sequence = &tokens[row * length..(row + 1) * length];
        let counts = &mut out[row * width..(row + 1) * width];
        for n in min_gram..=max_gram {
            let skips = if n == 1 { 0 } else { max_skip };
            for skip in 0..=skips {
                let step = skip + 1;
                for start in 0..length {
                    let last = start + (n - 1) * step;
                    if last >= length {
                        break;
                    }
                    let gram: Vec<i64> = (0..n).map(|i| sequence[start + i * step]).collect();
                    if let Some(&index) = lookup.get(&gram) {
                        counts[index] += 1.0;
                    }
                }
            }
        }
        let weight = |i: usize| weights.and_then(|w| w.get(i).copied()).unwrap_or(1.0);
        match attrs.string("mode").unwrap_or("TF") {
            "TF" => {}
            "IDF" => counts
                .iter_mut()
                .enumerate()
                .for_each(|(i, c)| *c = if *c > 0.0 { weight(i) } else { 0.0 }),
            "TFIDF" => counts
                .iter_mut()
                .enumerate()
                .for_each(|(i, c)| *c *= weight(i)),
            other => return Err(format!("unknown mode `{other}`")),
        }
    }
    let shape = if x.shape.len() == 1 {
        vec![width]
    } else {
        vec![rows, width]
    };
    Ok(RtTensor {
        shape,
        data: RtData::F32(out),
    })
}

/// MaxUnpool: zeros of the unpooled shape with each input value written at its index (indices
/// address the whole output tensor, as MaxPool's do).
pub(super) fn max_unpool(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let x = inputs.first().and_then(|t| *t).ok_or("X is missing")?;
    let positions = inputs.get(1).and_then(|t| *t).ok_or("I is missing")?;
    let shape: Vec<usize> = match inputs.get(2).and_then(|t| *t) {
        Some(target) => ints(target).iter().map(|&d| d.max(0) as usize).collect(),
        None => {
            if x.shape.len() < 3 {
                return Err(format!("X {:?} is not [N, C, spatial...]", x.shape));
            }
            let spatial: Vec<Option<u64>> = x.shape[2..].iter().map(|&d| Some(d as u64)).collect();
            let mut shape = x.shape[..2].to_vec();
            for size in max_unpool_dims(&node.attrs, &spatial)? {
                shape.push(size.unwrap_or(0) as usize);
            }
            shape
        }
    };
    let total: usize = shape.iter().product();
    let mut out = vec![0f32; total];
    for (&value, &index) in floats(x).iter().zip(&ints(positions)) {
        let index = usize::try_from(index)
            .ok()
            .filter(|&i| i < total)
            .ok_or_else(|| format!("index {index} outside an output of {total}"))?;
        out[index] = value;
    }
    Ok(RtTensor {
        shape,
        data: RtData::F32(out),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::Attr;
    use crate::exec::reference::lend;
    use crate::exec::reference::test_node as node;

    #[test]
    fn tfidf_counts_bigrams_with_skips() {
        // Pool: unigram 1; bigrams (1, 2) and (2, 3). Tokens 1 2 3 1 3.
        let n = node(
            "TfIdfVectorizer",
            &[
                ("pool_int64s", Attr::Ints(vec![1, 1, 2, 2, 3])),
                ("ngram_counts", Attr::Ints(vec![0, 1])),
                ("ngram_indexes", Attr::Ints(vec![0, 1, 2])),
                ("min_gram_length", Attr::Int(1)),
                ("max_gram_length", Attr::Int(2)),
                ("max_skip_count", Attr::Int(1)),
                ("mode", Attr::String("TF".into())),
            ],
        );
        let x = RtTensor {
            shape: vec![5],
            data: RtData::I64(vec![1, 2, 3, 1, 3]),
        };
        let out = tfidf_vectorizer(&n, &x).unwrap();
        // Unigram 1: twice. Skip 0 pairs (1,2) (2,3) (3,1) (1,3): (1,2) and (2,3) once each;
        // skip 1 pairs (1,3) (2,1) (3,3): none in the pool.
        assert_eq!(out.to_f32(), [2.0, 1.0, 1.0]);
    }

    #[test]
    fn max_unpool_scatters_to_the_indices() {
        let n = node(
            "MaxUnpool",
            &[
                ("kernel_shape", Attr::Ints(vec![2, 2])),
                ("strides", Attr::Ints(vec![2, 2])),
            ],
        );
        let x = RtTensor {
            shape: vec![1, 1, 1, 1],
            data: RtData::F32(vec![5.0]),
        };
        let i = RtTensor {
            shape: vec![1, 1, 1, 1],
            data: RtData::I64(vec![3]),
        };
        let out = max_unpool(&n, &lend(&[Some(x), Some(i)])).unwrap();
        assert_eq!(out.shape, [1, 1, 2, 2]);
        assert_eq!(out.to_f32(), [0.0, 0.0, 0.0, 5.0]);
    }
}
