//! The decode loop of `bench --decode N`: every timed run is one generation step whose outputs
//! feed the next, as a serving loop does. The token is the argmax of the last position's logits;
//! each `present` cache becomes the next `past` with its oldest entry dropped (a sliding window),
//! so the cache keeps the length the plan was built for and one plan serves every step.

use std::collections::HashMap;

use crate::exec::{Plan, RtData, RtTensor};

/// How a decoder's outputs map back onto its inputs.
#[derive(Clone, Debug)]
pub struct DecodeLoop {
    /// (present output, past input) pairs.
    caches: Vec<(String, String)>,
    logits: String,
    ids: String,
    /// Sequences per step (the ids input's first dim).
    pub batch: usize,
}

/// The present output a past input pairs with: `past_key_values.0.key` → `present.0.key`,
/// `past.0` → `present.0`.
fn present_name(past: &str) -> String {
    if past.contains("past_key_values") {
        past.replacen("past_key_values", "present", 1)
    } else {
        past.replacen("past", "present", 1)
    }
}

impl DecodeLoop {
    /// Pairs the plan's inputs and outputs, or says why this is not a decoder with a cache.
    pub fn new(plan: &Plan) -> Result<DecodeLoop, String> {
        let outputs = plan.output_names();
        let inputs = plan.inputs();
        let mut caches = Vec::new();
        for (name, shape, _) in &inputs {
            if !name.to_ascii_lowercase().contains("past") {
                continue;
            }
            let present = present_name(name);
            if !outputs.contains(&present) {
                return Err(format!(
                    "input `{name}` has no matching output `{present}` to feed back"
                ));
            }
            if shape.len() != 4 || shape[2] == 0 || shape[3] == 0 {
                return Err(format!(
                    "cache input `{name}` has shape {shape:?}; [batch, heads, length >= 1, head_dim >= 1] is needed"
                ));
            }
            caches.push((present, name.clone()));
        }
        if caches.is_empty() {
            return Err("the model has no `past*` inputs: no KV cache to feed back".into());
        }
        let ids = inputs
            .iter()
            .find(|(name, shape, integer)| {
                *integer && shape.len() == 2 && name.to_ascii_lowercase().contains("ids")
            })
            .map(|(name, shape, _)| (name.clone(), shape.clone()))
            .ok_or("the model has no `*ids` integer input [batch, sequence] to feed tokens")?;
        if ids.1[1] != 1 {
            return Err(format!(
                "`{}` has {} new tokens per step; decode takes 1 (bind the sequence dim to 1)",
                ids.0, ids.1[1]
            ));
        }
        let logits = outputs
            .iter()
            .find(|name| name.to_ascii_lowercase().contains("logits"))
            .or_else(|| outputs.iter().find(|name| !name.contains("present")))
            .cloned()
            .ok_or("the model has no logits output")?;
        Ok(DecodeLoop {
            caches,
            logits,
            batch: ids.1[0],
            ids: ids.0,
        })
    }

    /// The cache length (entries per sequence) the steps keep.
    pub fn cache_length(&self, inputs: &HashMap<String, RtTensor>) -> usize {
        inputs
            .get(&self.caches[0].1)
            .map(|t| t.shape[2])
            .unwrap_or(0)
    }

    /// Writes the next step's inputs from this step's outputs.
    pub fn feed(
        &self,
        outputs: &HashMap<String, RtTensor>,
        inputs: &mut HashMap<String, RtTensor>,
    ) -> Result<(), String> {
        let logits = outputs.get(&self.logits).ok_or("no logits were produced")?;
        let RtData::F32(scores) = &logits.data else {
            return Err("the logits are not float".into());
        };
        let batch = self.batch;
        let vocab = *logits
            .shape
            .last()
            .ok_or("the logits have no vocabulary axis")?;
        let per_sequence = scores.len() / batch.max(1);
        if logits.shape.len() < 2
            || vocab == 0
            || per_sequence < vocab
            || per_sequence * batch != scores.len()
        {
            return Err(format!(
                "logits of shape {:?} are not [batch {batch}, ..., vocabulary]",
                logits.shape
            ));
        }
        let tokens: Vec<i64> = (0..batch)
            .map(|b| {
                let last = &scores[(b + 1) * per_sequence - vocab..(b + 1) * per_sequence];
                last.iter()
                    .enumerate()
                    .max_by(|x, y| x.1.total_cmp(y.1))
                    .map_or(0, |(i, _)| i as i64)
            })
            .collect();
        inputs.insert(
            self.ids.clone(),
            RtTensor {
                shape: vec![batch, 1],
                data: RtData::I64(tokens),
            },
        );
        for (present, past) in &self.caches {
            let cache = outputs
                .get(present)
                .ok_or_else(|| format!("output `{present}` was not produced"))?;
            let RtData::F32(values) = &cache.data else {
                return Err(format!("`{present}` is not float"));
            };
            let [b, h, total, d] = cache.shape[..] else {
                return Err(format!("`{present}` has shape {:?}", cache.shape));
            };
            // The oldest entry of every (sequence, head) drops out.
            let kept = total - 1;
            let mut next = Vec::with_capacity(b * h * kept * d);
            for row in values.chunks_exact(total * d) {
                next.extend_from_slice(&row[d..]);
            }
            inputs.insert(
                past.clone(),
                RtTensor {
                    shape: vec![b, h, kept, d],
                    data: RtData::F32(next),
                },
            );
        }
        Ok(())
    }
}
