//! One model loader for every subcommand (ripgrep's low-level arguments → high-level ones): the
//! model spec (a file or `builtin:NAME`), `--input` shapes, `--batch` and `--dim` resolve here,
//! once, into a [`LoadedModel`]: the graph, with a QDQ model lowered onto the int8 ops, and the
//! bindings, a built-in's defaults when none were given. `analyze`, `bench`, `advise`,
//! `compress` and `run` all go through [`load`], so they see the same graph for the same file.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Result;
use clap::Args;

use roofline::analysis::tensor::TensorFact;
use roofline::analysis::{import, Bindings, Graph};
use roofline::builtin::{self, WeightFill};
use roofline::exec::{self, npy, RtTensor};

/// The model arguments shared by `analyze`, `bench` and `advise`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// ONNX file, or builtin:NAME (see `roofline models`).
    pub model: String,
    /// Bind an input: NAME=1x3x224x224, or NAME=FILE.npy for its shape and, where the model's
    /// shapes depend on an integer input's values (a Reshape's shape, Reduce axes), its values
    /// (repeatable; the name may be omitted for a one-input model).
    #[arg(short, long = "input")]
    pub inputs: Vec<String>,
    /// Bind the leading symbolic dim of every input (1 or more).
    #[arg(short, long, value_parser = super::batch_parser())]
    pub batch: Option<u64>,
    /// Bind a symbolic dim by name wherever it appears: NAME=VALUE (repeatable), e.g.
    /// --dim batch_size=1 --dim sequence_length=128 --dim past_sequence_length=2048.
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Run and cost every convolution direct (im2col + GEMM): no Winograd, to measure what the
    /// roofline's choice of algorithm buys.
    #[arg(long)]
    pub no_winograd: bool,
}

impl ModelArgs {
    /// The convolution algorithms the analysis and the plan may choose.
    pub fn conv_algorithms(&self) -> roofline::analysis::algorithm::AlgorithmPolicy {
        if self.no_winograd {
            roofline::analysis::algorithm::AlgorithmPolicy::DirectOnly
        } else {
            roofline::analysis::algorithm::AlgorithmPolicy::Auto
        }
    }

    /// Parses the bindings and loads the model (see [`load`]).
    pub fn load(&self, purpose: Purpose) -> Result<LoadedModel> {
        let mut loaded = load(&self.model, self.requested()?, purpose)?;
        let values = given_values(&self.inputs)?;
        if !values.is_empty() {
            specialise_if_needed(&mut loaded, &values);
        }
        Ok(loaded)
    }

    /// The values of the `--input NAME=FILE.npy` specs, by input name.
    pub fn given_values(&self) -> Result<HashMap<String, RtTensor>> {
        given_values(&self.inputs)
    }

    /// The `.npy` files named by `--input` (outputs must never replace them).
    pub fn input_files(&self) -> Vec<std::path::PathBuf> {
        self.inputs
            .iter()
            .filter_map(|spec| npy_spec(spec).map(|(_, file)| std::path::PathBuf::from(file)))
            .collect()
    }

    /// The bindings the user gave (a built-in's defaults not applied).
    pub fn requested(&self) -> Result<Bindings> {
        let dims = self
            .dims
            .iter()
            .map(|spec| Bindings::parse_dim(spec))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Bindings {
            inputs: parse_shapes(&self.inputs)?,
            batch: self.batch,
            dims,
        })
    }
}

/// Worker threads of the commands that run the model (`bench`, `advise`, `run`).
#[derive(Args, Debug)]
pub struct ThreadArgs {
    /// Worker threads for the kernels (1 to 1024).
    #[arg(short, long, default_value_t = 1, value_parser = super::threads_parser())]
    pub threads: usize,
}

/// What the graph is loaded for, which decides how a built-in model's weights are filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Analysis only: a built-in's weights are zeros, mapped lazily by the OS.
    Analyze,
    /// Execution: a built-in's weights are seeded random values (seed 0).
    Execute,
}

/// A model resolved from the command line.
#[derive(Debug)]
pub struct LoadedModel {
    /// The model argument as given: the reports' source.
    pub source: String,
    pub graph: Graph,
    pub bindings: Bindings,
}

/// Parses `NAME=1x3x224x224` shape bindings (`--input` of `analyze`, `bench`, `advise`;
/// `--shape` of `run`): the one place they are parsed.
pub fn parse_shapes(specs: &[String]) -> Result<Vec<(String, Vec<u64>)>> {
    specs
        .iter()
        .map(|spec| match npy_spec(spec) {
            Some((name, file)) => {
                let tensor = npy::read_npy(Path::new(file))?;
                Ok((
                    name.to_string(),
                    tensor.shape.iter().map(|&d| d as u64).collect(),
                ))
            }
            None => Ok(Bindings::parse_input(spec)?),
        })
        .collect()
}

/// `NAME=FILE.npy` split in two, when the spec names a `.npy` file.
fn npy_spec(spec: &str) -> Option<(&str, &str)> {
    let (name, file) = spec.split_once('=').unwrap_or(("", spec));
    file.to_ascii_lowercase()
        .ends_with(".npy")
        .then_some((name, file))
}

/// The tensors of the `--input NAME=FILE.npy` specs, by input name.
fn given_values(specs: &[String]) -> Result<HashMap<String, RtTensor>> {
    let mut values = HashMap::new();
    for spec in specs {
        if let Some((name, file)) = npy_spec(spec) {
            values.insert(name.to_string(), npy::read_npy(Path::new(file))?);
        }
    }
    Ok(values)
}

/// Makes the given integer inputs constants when the model's shapes cannot be inferred
/// without their values (and only then: an embedding's token ids given as a file would
/// otherwise fold the lookup away from the analysis).
fn specialise_if_needed(loaded: &mut LoadedModel, values: &HashMap<String, RtTensor>) {
    let unresolved = |graph: &Graph, bindings: &Bindings| -> bool {
        let mut trial = graph.clone();
        match roofline::analysis::prepare_graph(&mut trial, bindings) {
            Err(_) => true,
            Ok((_, states, _)) => {
                states
                    .values()
                    .any(|s| matches!(s, roofline::analysis::infer::NodeState::Failed(_)))
                    || trial
                        .outputs
                        .iter()
                        .any(|&v| trial.values[v].fact.concrete_shape().is_none())
            }
        }
    };
    if !unresolved(&loaded.graph, &loaded.bindings) {
        return;
    }
    // Integer inputs first; then also float inputs of a few elements (Resize scales, a Range's
    // bounds, OneHot's depth), which are parameters rather than data.
    let small: HashMap<String, RtTensor> = values
        .iter()
        .filter(|(_, t)| t.len() <= MAX_PARAMETER_ELEMENTS)
        .map(|(name, t)| (name.clone(), t.clone()))
        .collect();
    let attempts = [
        (values, exec::Specialise::Integers),
        (&small, exec::Specialise::All),
    ];
    for (candidates, which) in attempts {
        let Some((graph, bindings, bound)) =
            exec::specialised(&loaded.graph, &loaded.bindings, candidates, which)
        else {
            continue;
        };
        if which == exec::Specialise::All && unresolved(&graph, &bindings) {
            continue;
        }
        note!(
            "the model's shapes depend on the values of {}: analysed for the values given",
            super::safe(&bound.join(", "))
        );
        loaded.graph = graph;
        loaded.bindings = bindings;
        if !unresolved(&loaded.graph, &loaded.bindings) {
            return;
        }
    }
    observe_if_needed(loaded, values);
}

/// When shapes still depend on the data (NonZero, NonMaxSuppression, Unique, Compress and what
/// reads them) and every input was given as a file: runs the data-dependent nodes on those
/// values and takes the sizes they produce as the shapes of their outputs, so the rest of the
/// model is sized and costed for that input (the nodes themselves stay run-time work).
fn observe_if_needed(loaded: &mut LoadedModel, values: &HashMap<String, RtTensor>) {
    let missing: Vec<&str> = loaded
        .graph
        .inputs
        .iter()
        .map(|&v| loaded.graph.values[v].name.as_str())
        .filter(|name| !values.contains_key(*name))
        .collect();
    if !missing.is_empty() {
        return;
    }
    let options = exec::PlanOptions::default();
    let observed = match exec::observe_data_dependent_shapes(
        &loaded.graph,
        &loaded.bindings,
        values,
        &options,
        0,
    ) {
        Ok(observed) if !observed.is_empty() => observed,
        Ok(_) => return,
        Err(e) => {
            note!(
                "the shapes that depend on the data could not be observed on the values given: {}",
                super::safe(&e.to_string())
            );
            return;
        }
    };
    let mut described = Vec::new();
    for (name, dtype, shape) in &observed {
        let Some(value) = loaded.graph.value_by_name(name) else {
            continue;
        };
        let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        loaded.graph.values[value].declared = Some(TensorFact::known(*dtype, &dims));
        described.push(format!(
            "{} {}",
            super::safe(name),
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join("x")
        ));
    }
    note!(
        "sizes that depend on the data are taken from a run on the values given: {}",
        described.join(", ")
    );
}

/// Float inputs up to this many elements count as parameters when shapes depend on them.
const MAX_PARAMETER_ELEMENTS: usize = 16;

/// Loads `spec` (an ONNX file or `builtin:NAME`) with its bindings.
///
/// A file in the QDQ form (onnxruntime's static quantizer, `advise -o` with int8) is lowered
/// to the tool's quantized ops, so every command predicts and runs the int8 graph. When no shape,
/// no batch and no named dim is given, a built-in model gets its default bindings; a file gets none (its
/// symbolic dims stay unbound and say so).
pub fn load(spec: &str, requested: Bindings, purpose: Purpose) -> Result<LoadedModel> {
    let (graph, defaults) = if spec.starts_with("builtin:") {
        let builtin = builtin::find(spec)?;
        let fill = match purpose {
            Purpose::Analyze => builtin.analysis_fill(),
            Purpose::Execute => WeightFill::Random(0),
        };
        let graph = builtin.graph(fill)?;
        (graph, Some((builtin.default_bindings)()))
    } else {
        let mut graph = import::load_graph(Path::new(spec))?;
        // QOperator ops (QLinearConv...) become the QDQ form first, which the QDQ lowering
        // then puts on the int8 kernels.
        let expanded = roofline::advisor::qoperator::expand_qoperator(&mut graph);
        if expanded > 0 {
            note!("QOperator form expanded to QDQ: {expanded} quantized op(s)");
        }
        let lowered = roofline::advisor::qdq::lower_checked(&mut graph)?;
        if !lowered.is_empty() {
            note!(
                "QDQ form lowered: {} QConv, {} QMatMul, {} FakeQuant, {} float fallback(s)",
                lowered.qconv,
                lowered.qmatmul,
                lowered.fake_quant,
                lowered.float_fallback
            );
        }
        (graph, None)
    };
    let nothing_given =
        requested.inputs.is_empty() && requested.batch.is_none() && requested.dims.is_empty();
    let bindings = match defaults {
        Some(defaults) if nothing_given => defaults,
        _ => requested,
    };
    Ok(LoadedModel {
        source: spec.to_string(),
        graph,
        bindings,
    })
}
