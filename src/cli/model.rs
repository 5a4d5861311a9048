//! One model loader for every subcommand (ripgrep's low-level arguments → high-level ones): the
//! model spec (a file or `builtin:NAME`), `--input` shapes, `--batch` and `--dim` resolve here,
//! once, into a [`LoadedModel`]: the graph, with a QDQ model lowered onto the int8 ops, and the
//! bindings, a built-in's defaults when none were given. `analyze`, `bench`, `advise`,
//! `compress` and `run` all go through [`load`], so they see the same graph for the same file.

use std::path::Path;

use anyhow::Result;
use clap::Args;

use roofline::analysis::{import, Bindings, Graph};
use roofline::builtin::{self, WeightFill};

/// The model arguments shared by `analyze`, `bench` and `advise`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// ONNX file, or builtin:NAME (see `roofline models`).
    pub model: String,
    /// Bind an input: NAME=1x3x224x224 (repeatable; the name may be omitted for a one-input model).
    #[arg(short, long = "input")]
    pub inputs: Vec<String>,
    /// Bind the leading symbolic dim of every input (1 or more).
    #[arg(short, long, value_parser = super::batch_parser())]
    pub batch: Option<u64>,
    /// Bind a symbolic dim by name wherever it appears: NAME=VALUE (repeatable), e.g.
    /// --dim batch_size=1 --dim sequence_length=128 --dim past_sequence_length=2048.
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
}

impl ModelArgs {
    /// Parses the bindings and loads the model (see [`load`]).
    pub fn load(&self, purpose: Purpose) -> Result<LoadedModel> {
        load(&self.model, self.requested()?, purpose)
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
    Ok(specs
        .iter()
        .map(|spec| Bindings::parse_input(spec))
        .collect::<Result<_, _>>()?)
}

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
