//! The decode loop of `bench --decode N`: every timed run is one generation step whose outputs
//! feed the next, as a serving loop does. The token is the argmax of the last position's logits;
//! each `present` cache becomes the next `past` with its oldest entry dropped (a sliding window),
//! so the cache keeps the length the plan was built for and one plan serves every step.

use std::collections::HashMap;

use crate::exec::plan::Workspace;
use crate::exec::{Plan, RtData, RtTensor};

/// How a decoder's outputs map back onto its inputs.
#[derive(Clone, Debug)]
pub struct DecodeLoop {
    /// (present output, past input, the past input's shape) triples.
    caches: Vec<(String, String, Vec<usize>)>,
    logits: String,
    ids: String,
    /// Sequences per step (the ids input's first dim).
    pub batch: usize,
    /// Whether every cache can slide straight into its `past` slot: no `past` slot shares
    /// memory with a `present` output not yet read when it is written. Otherwise the caches go
    /// through copies staged with the next run.
    in_place: bool,
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
            caches.push((present, name.clone(), shape.clone()));
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
        let in_place = caches.iter().enumerate().all(|(i, (_, past, _))| {
            caches[i + 1..]
                .iter()
                .all(|(present, ..)| !plan.input_overlaps_output(past, present))
        });
        Ok(DecodeLoop {
            in_place,
            caches,
            logits,
            batch: ids.1[0],
            ids: ids.0,
        })
    }

    /// The cache length (entries per sequence) the steps keep.
    pub fn cache_length(&self) -> usize {
        self.caches[0].2[2]
    }

    /// Writes the next step's inputs from this step's outputs, left in `workspace`: the token
    /// into `inputs` (staged with the next run), each cache slid straight from its `present`
    /// slot into its `past` slot, which is then taken out of `inputs` (already in place).
    pub fn feed(
        &self,
        plan: &Plan,
        workspace: &mut Workspace,
        inputs: &mut HashMap<String, RtTensor>,
    ) -> Result<(), String> {
        let logits = plan
            .read_output(workspace, &self.logits)
            .ok_or("no logits were produced")?;
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
        for (present, past, past_shape) in &self.caches {
            let [b, h, kept, d] = past_shape[..] else {
                return Err(format!("`{past}` has shape {past_shape:?}"));
            };
            let total = kept + 1;
            if !self.in_place {
                let cache = plan
                    .read_output(workspace, present)
                    .ok_or_else(|| format!("output `{present}` was not produced"))?;
                let RtData::F32(values) = &cache.data else {
                    return Err(format!("`{present}` is not float"));
                };
                if cache.shape != [b, h, total, d] {
                    return Err(format!(
                        "`{present}` has shape {:?}, not one more entry than `{past}` {past_shape:?}",
                        cache.shape
                    ));
                }
                let mut next = vec![0.0; b * h * kept * d];
                slide(values, &mut next, d);
                let data = RtData::F32(next);
                let shape = past_shape.clone();
                inputs.insert(past.clone(), RtTensor { shape, data });
                continue;
            }
            let mut fitted = true;
            plan.output_into_input(workspace, present, past, |cache, next| {
                // The oldest entry of every (sequence, head) drops out.
                fitted = cache.len() == b * h * total * d && next.len() == b * h * kept * d;
                if fitted {
                    slide(cache, next, d);
                }
            })
            .map_err(|e| e.to_string())?;
            if !fitted {
                return Err(format!(
                    "`{present}` does not hold one more entry than `{past}` {past_shape:?}"
                ));
            }
            inputs.remove(past);
        }
        Ok(())
    }
}

/// `next` = `cache` with the oldest `entry`-float entry of every (sequence, head) row dropped:
/// rows of `total` entries in `cache`, `total - 1` in `next`.
fn slide(cache: &[f32], next: &mut [f32], entry: usize) {
    // Each row is one entry longer in `cache`: the length difference counts the rows.
    let rows = (cache.len() - next.len()) / entry.max(1);
    if rows == 0 {
        return;
    }
    let (total, kept) = (cache.len() / rows, next.len() / rows);
    for (row, out) in cache.chunks_exact(total).zip(next.chunks_exact_mut(kept)) {
        out.copy_from_slice(&row[entry..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Prepared;
    use crate::builtin::{self, WeightFill};
    use crate::exec::{build_plan, PlanOptions};

    /// Two rows of three 2-float entries: each loses its first entry.
    #[test]
    fn slide_drops_the_oldest_entry_of_every_row() {
        let cache: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let mut next = vec![0.0; 8];
        slide(&cache, &mut next, 2);
        assert_eq!(next, [2.0, 3.0, 4.0, 5.0, 8.0, 9.0, 10.0, 11.0]);
    }

    /// Sliding the caches inside the workspace gives the steps, token for token and logit for
    /// logit, that copying them out and staging them back gives.
    #[test]
    fn caches_slide_in_place_as_copies_would() {
        let model = builtin::find("llama-tiny").unwrap();
        let graph = model.graph(WeightFill::Random(7)).unwrap();
        let mut bindings = builtin::decoder_defaults(model.decoder.unwrap());
        bindings
            .dims
            .retain(|(name, _)| name != builtin::decoder::PAST_SEQUENCE);
        bindings
            .dims
            .push((builtin::decoder::PAST_SEQUENCE.to_string(), 12));
        let prepared = Prepared::new(graph, &bindings).unwrap();
        let plan = build_plan(
            &prepared.graph,
            &prepared.order,
            &prepared.states,
            &PlanOptions {
                keep_inputs: true,
                ..PlanOptions::default()
            },
        )
        .unwrap();
        let steps = |in_place: bool| {
            let mut decode = DecodeLoop::new(&plan).unwrap();
            assert!(decode.in_place, "llama-tiny's caches slide in place");
            decode.in_place = in_place;
            let mut inputs = crate::exec::random_inputs(&plan, 3);
            let mut workspace = plan.workspace();
            let mut logits = Vec::new();
            for _ in 0..4 {
                plan.stage_given_inputs(&mut workspace, &inputs).unwrap();
                plan.run_staged(&mut workspace, None).unwrap();
                logits.push(
                    plan.read_output(&workspace, &decode.logits)
                        .unwrap()
                        .to_f32(),
                );
                decode.feed(&plan, &mut workspace, &mut inputs).unwrap();
                assert_eq!(
                    inputs.len(),
                    if in_place { 1 } else { 1 + decode.caches.len() }
                );
            }
            logits
        };
        assert_eq!(steps(true), steps(false));
    }
}
