//! LLM inference on the roofline: the two phases of generation (prefill: the prompt in one
//! step; decode: one token per step against the KV cache), a storage precision per tensor class
//! (weights, activations, KV cache) as LLM-Viewer's w/a/kv bits, the KV-cache conventions of
//! serving runtimes, and the memory a configuration needs against the device's capacity.
//!
//! # Conventions (applied only when a phase or a class precision is asked for)
//! - **Tensor classes.** Weights are the float constants; the KV cache is every graph input
//!   whose name contains `past` and every graph output whose name contains `present`, and what
//!   movement ops (Concat, Transpose, Reshape and the other views) make of them; activations
//!   are the other float tensors. Integer tensors keep their own width.
//! - **Storage.** Each class's bytes are charged at its storage width (`--weights`,
//!   `--activations`, `--kv`; int4 is half a byte). The dot products run at the analysis
//!   precision (`--precision`): int4 or int8 weights with fp16 compute is the W4A16 / W8A16
//!   scheme, whose kernels dequantize in registers. An op's bytes of one kind (weights, reads,
//!   writes) are scaled by its inputs' (or outputs') ratio of storage to analysis widths, which
//!   is exact for ops that read each input once.
//! - **KV append in place.** `present = Concat(past, new)` is charged as writing the new
//!   entries only (reading nothing of the past): serving runtimes preallocate the cache and
//!   append to it (onnxruntime's shared past/present buffer, vLLM's paged cache, llama.cpp).
//! - Keys read transposed and scaled: a Transpose or a scalar `Mul` read only by MatMuls is a
//!   view in every analysis (`analysis::matmul_operand_views`), the cache's included.
//! - **Masks made in the kernel.** A boolean constant (the causal mask, folded from positions)
//!   is read from nowhere: attention kernels compute it from indices.
//! - Other movements of the cache are charged as they are: an exporter's `Expand` that repeats
//!   KV heads for grouped-query attention (Hugging Face's `repeat_kv`) is a real copy, and the
//!   MatMul after it reads the repeated cache.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::graph::{Graph, Node, NodeId, ValueId};
use super::infer::Bindings;
use super::model::{NodeAnalysis, NodeStatus};
use super::ops::{OpCost, Traffic};
use super::roofline::{Bound, Roof};
use super::tensor::{DType, Dim, TensorFact};
use crate::device::{DeviceProfile, MemoryLevel, Precision};

/// A phase of generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The prompt in one step: sets the time to first token.
    Prefill,
    /// One new token per sequence against the cache: sets the time per output token.
    Decode,
}

impl FromStr for Phase {
    type Err = String;
    fn from_str(text: &str) -> Result<Phase, String> {
        match text.to_ascii_lowercase().as_str() {
            "prefill" => Ok(Phase::Prefill),
            "decode" => Ok(Phase::Decode),
            _ => Err(format!("unknown phase `{text}` (prefill, decode)")),
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        })
    }
}

/// The storage format of one tensor class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    Fp64,
    Fp32,
    Fp16,
    Bf16,
    Fp8,
    Int8,
    Int4,
}

impl Storage {
    pub const ALL: [Storage; 7] = [
        Storage::Fp64,
        Storage::Fp32,
        Storage::Fp16,
        Storage::Bf16,
        Storage::Fp8,
        Storage::Int8,
        Storage::Int4,
    ];

    /// Bits per stored element (block scales of quantized formats not included).
    pub fn bits(self) -> u64 {
        match self {
            Storage::Fp64 => 64,
            Storage::Fp32 => 32,
            Storage::Fp16 | Storage::Bf16 => 16,
            Storage::Fp8 | Storage::Int8 => 8,
            Storage::Int4 => 4,
        }
    }

    /// The storage of float tensors at an analysis precision.
    pub fn of_precision(precision: Precision) -> Storage {
        match precision {
            Precision::Fp64 => Storage::Fp64,
            Precision::Fp32 | Precision::Tf32 => Storage::Fp32,
            Precision::Fp16 => Storage::Fp16,
            Precision::Bf16 => Storage::Bf16,
            Precision::Fp8 => Storage::Fp8,
            Precision::Int8 => Storage::Int8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Storage::Fp64 => "fp64",
            Storage::Fp32 => "fp32",
            Storage::Fp16 => "fp16",
            Storage::Bf16 => "bf16",
            Storage::Fp8 => "fp8",
            Storage::Int8 => "int8",
            Storage::Int4 => "int4",
        }
    }
}

impl FromStr for Storage {
    type Err = String;
    fn from_str(text: &str) -> Result<Storage, String> {
        Storage::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                format!("unknown storage `{text}` (fp64, fp32, fp16, bf16, fp8, int8, int4)")
            })
    }
}

/// What the user asked of an LLM analysis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LlmOptions {
    pub phase: Option<Phase>,
    pub weights: Option<Storage>,
    pub activations: Option<Storage>,
    pub kv: Option<Storage>,
}

impl LlmOptions {
    pub fn is_active(&self) -> bool {
        self.phase.is_some()
            || self.weights.is_some()
            || self.activations.is_some()
            || self.kv.is_some()
    }
}

/// Prompt and cache lengths used when a phase is asked for and the user binds neither (less
/// where a built-in preset's positions end sooner: see `phase_bindings`' `context`).
pub const DEFAULT_CONTEXT: u64 = 2048;

const BATCH_NAMES: &[&str] = &["batch", "batch_size"];
const SEQUENCE_NAMES: &[&str] = &["sequence", "sequence_length", "seq_len"];
const PAST_NAMES: &[&str] = &["past_sequence", "past_sequence_length", "past_seq_len"];
const TOTAL_NAMES: &[&str] = &["total_sequence", "total_sequence_length", "total_seq_len"];

/// The bindings of a phase: the user's dims first (`--dim`, and the dims `--input` shapes give),
/// then the well-known decoder dims the graph uses: batch 1; prefill: `context` new tokens on an
/// empty cache; decode: one new token after a cache of `context` entries (a total-length dim is
/// past + new).
pub fn phase_bindings(graph: &Graph, phase: Phase, user: &Bindings, context: u64) -> Bindings {
    let used: HashSet<String> = graph
        .inputs
        .iter()
        .filter_map(|&v| graph.values[v].fact.shape.as_ref())
        .flatten()
        .filter_map(|dim| match dim {
            Dim::Sym(name) => Some(name.clone()),
            Dim::Known(_) => None,
        })
        .collect();
    // Dims an `--input` shape fixes, by the symbol its input declares there.
    let mut from_inputs: Vec<(String, u64)> = Vec::new();
    for (name, dims) in &user.inputs {
        let input = graph.inputs.iter().find(|&&v| {
            graph.values[v].name == *name || (name.is_empty() && graph.inputs.len() == 1)
        });
        let declared = input.and_then(|&v| graph.values[v].fact.shape.as_ref());
        for (dim, &value) in declared.into_iter().flatten().zip(dims) {
            if let Dim::Sym(symbol) = dim {
                from_inputs.push((symbol.clone(), value));
            }
        }
    }
    let mut bindings = user.clone();
    let given = |bindings: &Bindings, names: &[&str]| {
        bindings
            .dims
            .iter()
            .chain(&from_inputs)
            .find(|(name, _)| names.contains(&name.as_str()))
            .map(|(_, value)| *value)
    };
    let bind = |bindings: &mut Bindings, names: &[&str], value: u64| {
        for name in names.iter().filter(|n| used.contains(**n)) {
            let already = bindings
                .dims
                .iter()
                .chain(&from_inputs)
                .any(|(given, _)| given == name);
            if !already {
                bindings.dims.push((name.to_string(), value));
            }
        }
    };
    if bindings.batch.is_none() {
        bind(&mut bindings, BATCH_NAMES, 1);
    }
    let (new, past) = match phase {
        Phase::Prefill => (
            given(&bindings, SEQUENCE_NAMES).unwrap_or(context),
            given(&bindings, PAST_NAMES).unwrap_or(0),
        ),
        Phase::Decode => (
            given(&bindings, SEQUENCE_NAMES).unwrap_or(1),
            given(&bindings, PAST_NAMES).unwrap_or(context),
        ),
    };
    bind(&mut bindings, SEQUENCE_NAMES, new);
    bind(&mut bindings, PAST_NAMES, past);
    bind(&mut bindings, TOTAL_NAMES, past.saturating_add(new));
    bindings
}

/// The storage width of each tensor class, and which values form the KV cache.
pub(crate) struct LlmCosting {
    base_bits: u64,
    weights_bits: u64,
    activations_bits: u64,
    kv_bits: u64,
    kv: HashSet<ValueId>,
    past_inputs: HashSet<ValueId>,
    present_outputs: HashSet<ValueId>,
    pub(crate) options: LlmOptions,
    pub(crate) storage: [Storage; 3],
}

/// One op's KV-cache traffic at its storage width, and the convention applied to it.
#[derive(Clone, Debug, Default)]
pub(crate) struct KvTraffic {
    pub read: u64,
    pub written: u64,
    pub convention: Option<&'static str>,
}

fn is_movement(op_type: &str) -> bool {
    matches!(
        op_type,
        "Concat"
            | "Transpose"
            | "Reshape"
            | "Squeeze"
            | "Unsqueeze"
            | "Flatten"
            | "Identity"
            | "Expand"
            | "Slice"
    )
}

impl LlmCosting {
    /// Classes of an inferred graph (`order` topological).
    pub(crate) fn new(
        graph: &Graph,
        order: &[NodeId],
        operand_views: &HashMap<ValueId, super::OperandView>,
        options: LlmOptions,
        precision: Precision,
    ) -> LlmCosting {
        // The analysis charges float tensors at the precision's width; storages rescale from it.
        let base = Storage::of_precision(precision);
        debug_assert_eq!(base.bits(), precision.bytes_per_element() * 8);
        let activations = options.activations.unwrap_or(base);
        let weights = options.weights.unwrap_or(base);
        let kv_storage = options.kv.unwrap_or(activations);
        let name_has =
            |v: ValueId, needle: &str| graph.values[v].name.to_ascii_lowercase().contains(needle);
        let past_inputs: HashSet<ValueId> = graph
            .inputs
            .iter()
            .copied()
            .filter(|&v| name_has(v, "past"))
            .collect();
        let present_outputs: HashSet<ValueId> = graph
            .outputs
            .iter()
            .copied()
            .filter(|&v| name_has(v, "present"))
            .collect();
        let mut kv: HashSet<ValueId> = past_inputs.union(&present_outputs).copied().collect();
        for &id in order {
            let node = &graph.dag[id];
            // A movement op of the cache yields the cache (a transposed or reshaped view of it),
            // and so does a scaling a MatMul reads through.
            let view = is_movement(&node.op_type)
                || node
                    .outputs
                    .first()
                    .is_some_and(|v| operand_views.contains_key(v));
            if view && node.inputs.iter().flatten().any(|v| kv.contains(v)) {
                kv.extend(node.outputs.iter().copied());
            }
        }
        LlmCosting {
            base_bits: base.bits(),
            weights_bits: weights.bits(),
            activations_bits: activations.bits(),
            kv_bits: kv_storage.bits(),
            kv,
            past_inputs,
            present_outputs,
            options,
            storage: [weights, activations, kv_storage],
        }
    }

    pub(crate) fn is_kv(&self, value: ValueId) -> bool {
        self.kv.contains(&value)
    }

    /// Bits of one element of `fact` (the value `value`) at the analysis precision and at its
    /// class's storage.
    fn widths(&self, value: ValueId, fact: &TensorFact) -> (u64, u64) {
        if !fact.dtype.is_float() {
            let bits = fact.dtype.size_bytes() * 8;
            return (bits, bits);
        }
        let stored = if fact.is_constant() {
            self.weights_bits
        } else if self.kv.contains(&value) {
            self.kv_bits
        } else {
            self.activations_bits
        };
        (self.base_bits, stored)
    }

    fn bits_of(&self, value: ValueId, fact: &TensorFact) -> (u128, u128) {
        let count = fact.element_count().unwrap_or(0) as u128;
        let (base, stored) = self.widths(value, fact);
        (count * base as u128, count * stored as u128)
    }

    /// The op's cost under the conventions of this module, and its KV traffic.
    pub(crate) fn adjust(
        &self,
        graph: &Graph,
        node: &Node,
        mut cost: OpCost,
    ) -> (OpCost, KvTraffic) {
        let mut kv = KvTraffic::default();
        let fact = |v: ValueId| &graph.values[v].fact;
        // The cache appended in place: only the new entries are written.
        let past_slot = node
            .inputs
            .iter()
            .flatten()
            .copied()
            .find(|v| self.past_inputs.contains(v));
        let appends = node.op_type == "Concat"
            && past_slot.is_some()
            && node
                .outputs
                .iter()
                .any(|v| self.present_outputs.contains(v));
        let mut skip_in: HashSet<ValueId> = HashSet::new();
        if appends {
            let past = past_slot.expect("checked above");
            let past_bytes = fact(past)
                .element_count()
                .unwrap_or(0)
                .saturating_mul(self.base_bits / 8);
            cost.bytes.act_read = cost.bytes.act_read.saturating_sub(past_bytes);
            cost.bytes.act_written = cost.bytes.act_written.saturating_sub(past_bytes);
            skip_in.insert(past);
            kv.convention = Some("KV cache appended in place: the new entries written");
        }
        // A boolean constant (the causal mask, folded from positions) is what attention kernels
        // compute from indices: nothing is read for it.
        for &value in node.inputs.iter().flatten() {
            let f = fact(value);
            if f.is_constant() && f.dtype == DType::Bool && skip_in.insert(value) {
                let bytes = f.element_count().unwrap_or(0);
                cost.bytes.weights_read = cost.bytes.weights_read.saturating_sub(bytes);
                kv.convention
                    .get_or_insert("boolean mask constants made in the kernel: nothing read");
            }
        }
        // Storage widths, input by input.
        let (mut weights, mut reads, mut writes) = ([0u128; 2], [0u128; 2], [0u128; 2]);
        let mut kv_read_bits = 0u128;
        for &value in node.inputs.iter().flatten() {
            if skip_in.contains(&value) {
                continue;
            }
            let f = fact(value);
            let (base, stored) = self.bits_of(value, f);
            let bucket = if f.is_constant() {
                &mut weights
            } else {
                &mut reads
            };
            bucket[0] += base;
            bucket[1] += stored;
            if self.kv.contains(&value) {
                kv_read_bits += stored;
            }
        }
        let mut kv_write_bits = 0u128;
        let mut past_bits = 0u128;
        if appends {
            if let Some(past) = past_slot {
                past_bits = self.bits_of(past, fact(past)).1;
            }
        }
        for &value in &node.outputs {
            let (base, stored) = self.bits_of(value, fact(value));
            writes[0] += base;
            writes[1] += stored;
            if self.kv.contains(&value) {
                kv_write_bits += stored;
            }
        }
        if appends {
            // The outputs hold past + new; only the new part was written.
            let past_base = past_slot.map(|p| self.bits_of(p, fact(p)).0).unwrap_or(0);
            writes[0] = writes[0].saturating_sub(past_base);
            writes[1] = writes[1].saturating_sub(past_bits);
            kv_write_bits = kv_write_bits.saturating_sub(past_bits);
        }
        let scale = |bytes: u64, [base, stored]: [u128; 2]| -> u64 {
            if base == 0 || base == stored {
                bytes
            } else {
                (bytes as u128 * stored / base) as u64
            }
        };
        if !cost.is_view {
            cost.bytes = Traffic {
                weights_read: scale(cost.bytes.weights_read, weights),
                act_read: scale(cost.bytes.act_read, reads),
                act_written: scale(cost.bytes.act_written, writes),
                input_read: 0,
            };
            // KV traffic in proportion to what the op's charged reads and writes hold.
            let share = |bytes: u64, part: u128, [_, stored]: [u128; 2]| -> u64 {
                (bytes as u128 * part).checked_div(stored).unwrap_or(0) as u64
            };
            kv.read = share(cost.bytes.act_read, kv_read_bits, reads);
            kv.written = share(cost.bytes.act_written, kv_write_bits, writes);
        }
        (cost, kv)
    }
}

/// Memory a configuration holds at once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmMemory {
    /// The weights the running ops read, at their storage width.
    pub weights_bytes: u64,
    /// The KV cache after this step (past + new entries), at its storage width.
    pub kv_cache_bytes: u64,
    /// The most activation bytes alive at once (each op's outputs live from their producer to
    /// their last reader; views share their input's buffer).
    pub activation_peak_bytes: u64,
    pub total_bytes: u64,
    /// The device's memory, when its profile states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fits: Option<bool>,
    /// The largest batch whose cache and activations fit next to the weights (both grow in
    /// proportion to the batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<u64>,
}

/// The phase summary of an LLM analysis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmSummary {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    pub batch: u64,
    /// New tokens per sequence in this step (the prompt in prefill, 1 in decode).
    pub new_tokens: u64,
    /// Cache entries per sequence after the step (past + new): what the step's attention
    /// spans. Read from the `present` outputs' third axis ([batch, heads, length, head_dim]).
    pub context_tokens: u64,
    pub weights: Storage,
    pub activations: Storage,
    pub kv: Storage,
    /// The precision the dot products run at.
    pub compute: Precision,
    /// The step's roofline bound.
    pub latency_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_s: Option<f64>,
    /// Prefill: the step's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_token_s: Option<f64>,
    /// Decode: the step's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_per_output_token_s: Option<f64>,
    /// Tokens the step produces (decode) or consumes (prefill) per second, over the batch.
    pub tokens_per_s: f64,
    /// The bound that holds most of the step's time, and its share.
    pub set_by: Bound,
    pub set_by_share: f64,
    pub weight_bytes_read: u64,
    pub kv_bytes_read: u64,
    pub kv_bytes_written: u64,
    /// (weights + KV bytes moved) ÷ DRAM bandwidth: the floor of a memory-bound step, next to
    /// which `latency_s` shows what the other ops (activations, launch overheads) add.
    pub stream_floor_s: f64,
    /// The fixed per-op cost (kernel launch, dispatch) summed over the running ops: with the
    /// stream floor and `other_s` it makes up `latency_s`.
    pub launch_overhead_s: f64,
    pub running_ops: u64,
    /// What the rest adds: activation traffic, and compute beyond the streaming time.
    pub other_s: f64,
    pub memory: LlmMemory,
    /// The conventions applied (see the module doc).
    pub conventions: Vec<String>,
    /// The same step at other batch sizes (`batch_sweep`), up to the largest that fits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch_sweep: Vec<BatchPoint>,
}

/// One batch size of a sweep: what batching buys until the step turns compute-bound or the
/// memory runs out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchPoint {
    pub batch: u64,
    /// The step's time (expected where calibrated, else the bound).
    pub step_s: f64,
    pub tokens_per_s: f64,
    pub set_by: Bound,
    pub fits: Option<bool>,
}

/// Batch sizes of a sweep: powers of two up to `limit` (and `limit` itself).
pub fn sweep_batches(limit: u64) -> Vec<u64> {
    let mut batches: Vec<u64> = std::iter::successors(Some(1u64), |b| b.checked_mul(2))
        .take_while(|&b| b <= limit)
        .collect();
    if batches.last() != Some(&limit) && limit > 0 {
        batches.push(limit);
    }
    batches
}

impl BatchPoint {
    pub fn of(summary: &LlmSummary) -> BatchPoint {
        let step_s = summary.expected_s.unwrap_or(summary.latency_s);
        BatchPoint {
            batch: summary.batch,
            step_s,
            tokens_per_s: summary.tokens_per_s,
            set_by: summary.set_by,
            fits: summary.memory.fits,
        }
    }
}

/// Sums of an analysis the summary needs, accumulated node by node.
#[derive(Default)]
pub(crate) struct LlmTotals {
    pub kv_read: u64,
    pub kv_written: u64,
    pub conventions: Vec<String>,
}

impl LlmTotals {
    pub(crate) fn add(&mut self, traffic: &KvTraffic) {
        self.kv_read += traffic.read;
        self.kv_written += traffic.written;
        if let Some(convention) = traffic.convention {
            let line = convention.to_string();
            if !self.conventions.contains(&line) {
                self.conventions.push(line);
            }
        }
    }
}

/// The summary of an analysed LLM step.
#[allow(clippy::too_many_arguments)]
pub(crate) fn summarize(
    graph: &Graph,
    order: &[NodeId],
    nodes: &[NodeAnalysis],
    costing: &LlmCosting,
    totals: LlmTotals,
    device: &DeviceProfile,
    roof: &Roof,
    precision: Precision,
) -> LlmSummary {
    let ids = graph
        .inputs
        .iter()
        .copied()
        .find(|&v| !costing.is_kv(v) && !graph.values[v].fact.dtype.is_float());
    let dims = ids
        .and_then(|v| graph.values[v].fact.concrete_shape())
        .unwrap_or_default();
    let batch = dims.first().copied().unwrap_or(1).max(1);
    let new_tokens = dims.get(1).copied().unwrap_or(1);
    let context_tokens = graph
        .outputs
        .iter()
        .filter(|v| costing.present_outputs.contains(v))
        .filter_map(|&v| graph.values[v].fact.concrete_shape())
        .find_map(|shape| shape.get(2).copied())
        .unwrap_or(new_tokens);
    let latency_s: f64 = nodes.iter().map(|n| n.predicted_s).sum();
    let expected = nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed)
        .map(|n| n.expected_s)
        .sum::<Option<f64>>();
    let mut by_bound: HashMap<Bound, f64> = HashMap::new();
    for node in nodes {
        *by_bound.entry(node.bound).or_default() += node.predicted_s;
    }
    let (set_by, set_by_time) = by_bound
        .into_iter()
        .filter(|(bound, _)| *bound != Bound::None)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((Bound::None, 0.0));
    let weight_bytes_read: u64 = nodes.iter().map(|n| n.weights_bytes).sum();
    let stream_bytes = weight_bytes_read + totals.kv_read + totals.kv_written;
    let stream_floor_s = stream_bytes as f64 / roof.bandwidth_bytes_per_s;
    let running_ops = nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed)
        .count() as u64;
    let launch_overhead_s = running_ops as f64 * roof.launch_overhead_s;
    let phase = costing.options.phase;
    let memory = memory_needs(graph, order, nodes, costing, device, batch);
    let tokens = batch * new_tokens.max(1);
    let [weights, activations, kv] = costing.storage;
    LlmSummary {
        phase,
        batch,
        new_tokens,
        context_tokens,
        weights,
        activations,
        kv,
        compute: precision,
        latency_s,
        expected_s: expected,
        time_to_first_token_s: (phase == Some(Phase::Prefill))
            .then_some(expected.unwrap_or(latency_s)),
        time_per_output_token_s: (phase == Some(Phase::Decode))
            .then_some(expected.unwrap_or(latency_s)),
        tokens_per_s: tokens as f64 / expected.unwrap_or(latency_s).max(f64::MIN_POSITIVE),
        set_by,
        set_by_share: if latency_s > 0.0 {
            set_by_time / latency_s
        } else {
            0.0
        },
        weight_bytes_read,
        kv_bytes_read: totals.kv_read,
        kv_bytes_written: totals.kv_written,
        stream_floor_s,
        launch_overhead_s,
        running_ops,
        other_s: latency_s - stream_floor_s - launch_overhead_s,
        memory,
        conventions: totals.conventions,
        batch_sweep: Vec::new(),
    }
}

fn memory_needs(
    graph: &Graph,
    order: &[NodeId],
    nodes: &[NodeAnalysis],
    costing: &LlmCosting,
    device: &DeviceProfile,
    batch: u64,
) -> LlmMemory {
    let stored_bytes = |v: ValueId| -> u64 {
        let fact = &graph.values[v].fact;
        let (_, bits) = costing.bits_of(v, fact);
        bits.div_ceil(8) as u64
    };
    let running: Vec<bool> = nodes
        .iter()
        .map(|n| {
            matches!(
                n.status,
                NodeStatus::Costed | NodeStatus::View | NodeStatus::NotCosted
            )
        })
        .collect();
    let mut weights_seen: HashSet<ValueId> = HashSet::new();
    let mut weights_bytes = 0u64;
    // A view's output shares its input's buffer: reads of either keep the buffer (its root,
    // the value a non-view op wrote) alive.
    let mut root: HashMap<ValueId, ValueId> = HashMap::new();
    let root_of = |root: &HashMap<ValueId, ValueId>, value: ValueId| {
        root.get(&value).copied().unwrap_or(value)
    };
    let mut last_reader: HashMap<ValueId, usize> = HashMap::new();
    for (index, &id) in order.iter().enumerate() {
        if !running[index] {
            continue;
        }
        let node = &graph.dag[id];
        for &value in node.inputs.iter().flatten() {
            let fact = &graph.values[value].fact;
            if fact.is_constant() {
                let weight_type =
                    fact.dtype.is_float() || matches!(fact.dtype, DType::I8 | DType::U8);
                if weight_type && weights_seen.insert(value) {
                    weights_bytes += stored_bytes(value);
                }
            } else {
                last_reader.insert(root_of(&root, value), index);
            }
        }
        if nodes[index].status == NodeStatus::View {
            if let Some(&input) = node.inputs.iter().flatten().next() {
                let shared = root_of(&root, input);
                for &output in &node.outputs {
                    root.insert(output, shared);
                }
            }
        }
    }
    let kv_cache_bytes: u64 = graph
        .outputs
        .iter()
        .filter(|v| costing.present_outputs.contains(v))
        .map(|&v| stored_bytes(v))
        .sum();
    // Activation liveness: outputs of running, non-view ops from their producer to their last
    // reader (graph outputs to the end); the cache is counted above.
    let mut frees: Vec<u64> = vec![0; order.len() + 1];
    let mut live = 0u64;
    let mut peak = 0u64;
    for (index, &id) in order.iter().enumerate() {
        live -= std::mem::take(&mut frees[index]);
        if !running[index] || nodes[index].status == NodeStatus::View {
            continue;
        }
        for &value in &graph.dag[id].outputs {
            if costing.is_kv(value) || graph.values[value].fact.is_constant() {
                continue;
            }
            let bytes = stored_bytes(value);
            // A graph output (or a view of the buffer that is one) lives to the end.
            let is_output = graph
                .outputs
                .iter()
                .any(|&out| root_of(&root, out) == value);
            let end = if is_output {
                order.len()
            } else {
                last_reader.get(&value).map(|&r| r + 1).unwrap_or(index + 1)
            };
            live += bytes;
            frees[end.min(order.len())] += bytes;
        }
        peak = peak.max(live);
    }
    let total_bytes = weights_bytes + kv_cache_bytes + peak;
    let capacity_bytes = device
        .memory
        .iter()
        .find(|m| m.level == MemoryLevel::Dram)
        .and_then(|m| m.capacity_bytes);
    let per_batch = (kv_cache_bytes + peak) / batch.max(1);
    let max_batch = capacity_bytes.map(|capacity| {
        capacity
            .saturating_sub(weights_bytes)
            .checked_div(per_batch)
            .unwrap_or(u64::MAX)
    });
    LlmMemory {
        weights_bytes,
        kv_cache_bytes,
        activation_peak_bytes: peak,
        total_bytes,
        capacity_bytes,
        fits: capacity_bytes.map(|c| total_bytes <= c),
        max_batch,
    }
}
