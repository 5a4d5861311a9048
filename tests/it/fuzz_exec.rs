//! Bounded, structure-aware fuzzing of everything after the loader: small valid models are
//! mutated the way hostile or broken files are (dims, stored element counts, attributes, input
//! lists, producers, op types, graph input shapes), then go through import → analyze → plan →
//! run on the tool's own kernels, and through the advisor and ONNX export. Any of them may refuse
//! the model; none may panic. A fixed seed makes every run repeatable; `ROOFLINE_FUZZ_EXEC_CASES`
//! raises the count for long runs (the closing note of issue 18 gives the figure run).

use std::collections::HashMap;
use std::path::Path;

use bytes::Bytes;
use prost::Message;
use roofline::advisor::{self, export, AdviseOptions};
use roofline::analysis::onnx_proto::{
    attribute_type, tensor_shape_proto, AttributeProto, ModelProto, NodeProto, TensorProto,
};
use roofline::analysis::schema::{self, AttrKind};
use roofline::analysis::{self, import, AnalyzeOptions, Bindings};
use roofline::builtin::{ConvSpec, GraphBuilder, SigDim, WeightFill};
use roofline::device::find_device;
use roofline::exec::plan::{build_plan, PlanOptions};

thread_local! {
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub(super) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn int_attr(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: value,
        ..Default::default()
    }
}

fn ints_attr(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INTS,
        ints: values.to_vec(),
        ..Default::default()
    }
}

/// A small CNN touching the convolution, depthwise, normalisation, pooling, residual, GEMM and
/// softmax kernels.
pub(super) fn cnn_seed() -> ModelProto {
    let mut b = GraphBuilder::new(WeightFill::Random(7));
    let x = b.input(
        "x",
        1,
        &[
            SigDim::Fixed(1),
            SigDim::Fixed(3),
            SigDim::Fixed(8),
            SigDim::Fixed(8),
        ],
    );
    let y = b.conv(
        &x,
        3,
        ConvSpec {
            bias: true,
            ..ConvSpec::new(8, 3, 1)
        },
    );
    let y = b.batch_norm(&y, 8);
    let y = b.relu(&y);
    let dw = b.conv(
        &y,
        8,
        ConvSpec {
            group: 8,
            ..ConvSpec::new(8, 3, 1)
        },
    );
    let y = b.add(&y, &dw);
    let y = b.max_pool(&y, 2, 2, 0);
    let pooled = b.node(
        "AveragePool",
        &[&y],
        vec![
            ints_attr("kernel_shape", &[2, 2]),
            ints_attr("strides", &[1, 1]),
        ],
    );
    let y = b.node("Sigmoid", &[&pooled], vec![]);
    let y = b.global_avg_pool(&y);
    let y = b.flatten(&y);
    let y = b.gemm(&y, 8, 5);
    let y = b.softmax(&y, -1);
    b.output(&y, 1, &[SigDim::Fixed(1), SigDim::Fixed(5)]);
    b.finish("fuzz_cnn")
}

/// A small attention block: layer norm, projections, split, reshape/transpose, matmuls,
/// softmax, concat, reductions and gathers. (Split is not used: the executor runs it only on
/// constant inputs today.)
pub(super) fn attention_seed() -> ModelProto {
    let mut b = GraphBuilder::new(WeightFill::Random(11));
    let x = b.input(
        "x",
        1,
        &[SigDim::Fixed(1), SigDim::Fixed(4), SigDim::Fixed(8)],
    );
    let h = b.layer_norm(&x, 8);
    let qkv = b.linear(&h, 8, 24);
    let axis = b.int64_const("axis", &[2]);
    let mut parts = Vec::new();
    for part in 0..3 {
        let start = b.int64_const("start", &[8 * part]);
        let end = b.int64_const("end", &[8 * part + 8]);
        parts.push(b.node("Slice", &[&qkv, &start, &end, &axis], vec![]));
    }
    let (q, k, v) = (parts[0].clone(), parts[1].clone(), parts[2].clone());
    let q = b.reshape(&q, &[1, 4, 2, 4]);
    let q = b.transpose(&q, &[0, 2, 1, 3]);
    let k = b.reshape(&k, &[1, 4, 2, 4]);
    let k = b.transpose(&k, &[0, 2, 3, 1]);
    let v = b.reshape(&v, &[1, 4, 2, 4]);
    let v = b.transpose(&v, &[0, 2, 1, 3]);
    let scores = b.node("MatMul", &[&q, &k], vec![]);
    let probs = b.softmax(&scores, -1);
    let ctx = b.node("MatMul", &[&probs, &v], vec![]);
    let ctx = b.transpose(&ctx, &[0, 2, 1, 3]);
    let ctx = b.reshape(&ctx, &[1, 4, 8]);
    let both = b.node("Concat", &[&ctx, &h], vec![int_attr("axis", -1)]);
    let out = b.linear(&both, 16, 8);
    let out = b.add(&out, &x);
    let mean = b.node(
        "ReduceMean",
        &[&out],
        vec![ints_attr("axes", &[1]), int_attr("keepdims", 1)],
    );
    let index = b.int64_const("index", &[0]);
    let first = b.node("Gather", &[&out, &index], vec![int_attr("axis", 1)]);
    let joined = b.node("Concat", &[&mean, &first], vec![int_attr("axis", 1)]);
    b.output(
        &joined,
        1,
        &[SigDim::Fixed(1), SigDim::Fixed(2), SigDim::Fixed(8)],
    );
    b.finish("fuzz_attention")
}

const OP_TYPES: &[&str] = &[
    "Relu",
    "Sigmoid",
    "Add",
    "Mul",
    "Conv",
    "MaxPool",
    "AveragePool",
    "Gemm",
    "MatMul",
    "Softmax",
    "Concat",
    "Split",
    "Reshape",
    "Transpose",
    "Gather",
    "Slice",
    "Pad",
    "Flatten",
    "BatchNormalization",
    "LayerNormalization",
    "ReduceMean",
    "TopK",
    "Where",
    "Cast",
    "Squeeze",
    "Unsqueeze",
    "Expand",
    "Tile",
    "Resize",
    "GlobalAveragePool",
    "Clip",
    "ConvTranspose",
    "InstanceNormalization",
    "Identity",
    "Constant",
    "Shape",
    "Range",
    "CumSum",
    "ArgMax",
];

const ATTRS: &[&str] = &[
    "group",
    "axis",
    "strides",
    "pads",
    "kernel_shape",
    "dilations",
    "perm",
    "split",
    "k",
    "keepdims",
    "transA",
    "transB",
    "axes",
    "to",
    "epsilon",
];

const INTERESTING: &[i64] = &[
    -3,
    -2,
    -1,
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    9,
    64,
    1 << 20,
    i64::MAX,
    i64::MIN,
];

fn interesting(rng: &mut SplitMix) -> i64 {
    *rng.pick(INTERESTING)
}

/// One structure-aware mutation of `model`.
pub(super) fn mutate(model: &mut ModelProto, rng: &mut SplitMix) {
    let graph = model.graph.as_mut().expect("seed has a graph");
    let value_names: Vec<String> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(graph.initializer.iter().map(|t| t.name.clone()))
        .chain(graph.input.iter().map(|i| i.name.clone()))
        .collect();
    match rng.below(11) {
        // An initializer's dims or stored count no longer agree.
        0 if !graph.initializer.is_empty() => {
            let index = rng.below(graph.initializer.len());
            let tensor = &mut graph.initializer[index];
            if tensor.dims.is_empty() {
                tensor.dims.push(interesting(rng));
            } else {
                let axis = rng.below(tensor.dims.len());
                tensor.dims[axis] = interesting(rng);
            }
        }
        1 if !graph.initializer.is_empty() => {
            let index = rng.below(graph.initializer.len());
            let tensor = &mut graph.initializer[index];
            match rng.below(3) {
                0 => {
                    let keep = rng.below(tensor.raw_data.len() + 1);
                    tensor.raw_data = tensor.raw_data.slice(..keep);
                }
                1 if tensor.data_type == 1 => {
                    let count = rng.below(6);
                    tensor.raw_data = Bytes::new();
                    tensor.float_data = vec![0.5; count];
                }
                _ if tensor.data_type == 7 => {
                    let count = rng.below(6);
                    tensor.raw_data = Bytes::new();
                    tensor.int64_data = (0..count).map(|_| interesting(rng)).collect();
                }
                _ => tensor.data_type = rng.below(25) as i32,
            }
        }
        // An attribute set to an edge value: mostly one the op's schema defines, with the
        // declared kind, so the case gets past validation into inference and the kernels.
        2 | 3 if !graph.node.is_empty() => {
            let index = rng.below(graph.node.len());
            let node = &mut graph.node[index];
            let defined: Vec<(&str, AttrKind)> = schema::lookup(&node.op_type, 17)
                .map(|s| {
                    s.attributes
                        .iter()
                        .filter(|(_, kind, _)| matches!(kind, AttrKind::Int | AttrKind::Ints))
                        .map(|(name, kind, _)| (*name, *kind))
                        .collect()
                })
                .unwrap_or_default();
            let (name, as_list) = if !defined.is_empty() && rng.below(4) != 0 {
                let (name, kind) = *rng.pick(&defined);
                (name, kind == AttrKind::Ints)
            } else {
                (*rng.pick(ATTRS), rng.below(2) == 0)
            };
            node.attribute.retain(|a| a.name != name);
            if !as_list {
                node.attribute.push(int_attr(name, interesting(rng)));
            } else {
                let len = rng.below(5);
                let values: Vec<i64> = (0..len).map(|_| interesting(rng)).collect();
                node.attribute.push(ints_attr(name, &values));
            }
        }
        // Input lists: dropped, extra, rewired or undefined.
        4 if !graph.node.is_empty() => {
            let index = rng.below(graph.node.len());
            let node = &mut graph.node[index];
            match rng.below(4) {
                0 if !node.input.is_empty() => {
                    let at = rng.below(node.input.len());
                    node.input.remove(at);
                }
                1 => node.input.push(rng.pick(&value_names).clone()),
                2 if !node.input.is_empty() => {
                    let at = rng.below(node.input.len());
                    node.input[at] = rng.pick(&value_names).clone();
                }
                _ if !node.input.is_empty() => {
                    let at = rng.below(node.input.len());
                    node.input[at] = "never_produced".into();
                }
                _ => {}
            }
        }
        // Two producers of one tensor, or a node writing an initializer.
        5 if graph.node.len() > 1 => {
            let a = rng.below(graph.node.len());
            let name = rng.pick(&value_names).clone();
            if let Some(out) = graph.node[a].output.first_mut() {
                *out = name;
            }
        }
        6 if !graph.node.is_empty() => {
            let index = rng.below(graph.node.len());
            graph.node[index].op_type = rng.pick(OP_TYPES).to_string();
        }
        // Graph input dims: zero, negative, huge.
        7 => {
            if let Some(input) = graph.input.first_mut() {
                if let Some(shape) = input.r#type.as_mut().and_then(|t| match t.value.as_mut() {
                    Some(roofline::analysis::onnx_proto::type_proto::Value::TensorType(tensor)) => {
                        tensor.shape.as_mut()
                    }
                    _ => None,
                }) {
                    if !shape.dim.is_empty() {
                        let axis = rng.below(shape.dim.len());
                        shape.dim[axis].value = Some(
                            tensor_shape_proto::dimension::Value::DimValue(interesting(rng)),
                        );
                    }
                }
            }
        }
        8 if graph.node.len() > 1 => {
            let (a, b) = (rng.below(graph.node.len()), rng.below(graph.node.len()));
            graph.node.swap(a, b);
        }
        9 if !graph.node.is_empty() => {
            let index = rng.below(graph.node.len());
            let node = &mut graph.node[index];
            if rng.below(2) == 0 {
                node.output.push(format!("extra_{}", rng.below(4)));
            } else if node.output.len() > 1 {
                node.output.pop();
            }
        }
        _ => {
            // A Constant node with an inconsistent tensor feeding an existing node.
            let count = rng.below(4);
            let dims = vec![interesting(rng).clamp(-2, 16)];
            let name = format!("konst_{}", rng.below(1000));
            graph.node.insert(
                0,
                NodeProto {
                    output: vec![name.clone()],
                    op_type: "Constant".into(),
                    name: name.clone(),
                    attribute: vec![AttributeProto {
                        name: "value".into(),
                        r#type: attribute_type::TENSOR,
                        t: Some(TensorProto {
                            dims,
                            data_type: 1,
                            float_data: vec![1.0; count],
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            );
            if graph.node.len() > 1 {
                let target = 1 + rng.below(graph.node.len() - 1);
                let node = &mut graph.node[target];
                if !node.input.is_empty() {
                    let at = rng.below(node.input.len());
                    node.input[at] = name;
                }
            }
        }
    }
}

/// What happened to one case, for the summary.
#[derive(Default)]
struct Tally {
    refused_at_import: usize,
    refused_at_analysis: usize,
    ran: usize,
    advised: usize,
}

/// Runs one model through every stage; errors end the case, panics fail the test.
fn exercise(model: &ModelProto, tally: &mut Tally) {
    let bytes = model.encode_to_vec();
    let path = Path::new("fuzz.onnx");
    let Ok(decoded) = import::decode_model(Bytes::from(bytes), path) else {
        tally.refused_at_import += 1;
        return;
    };
    let Ok(graph) = import::import_model(&decoded, Path::new("/nonexistent-fuzz-dir"), path) else {
        tally.refused_at_import += 1;
        return;
    };
    let device = find_device("rtx2080ti").unwrap().to_profile();
    let options = AnalyzeOptions {
        bindings: Bindings {
            inputs: Vec::new(),
            batch: Some(1),
            dims: Vec::new(),
        },
        ..AnalyzeOptions::default()
    };
    if analysis::analyze_graph(graph.clone(), "fuzz", &device, &options).is_err() {
        tally.refused_at_analysis += 1;
        return;
    }
    // Plan and run, with a small memory cap so a mutated dim cannot take the machine.
    let mut planned = graph.clone();
    if let Ok((order, states, _)) = analysis::prepare_graph(&mut planned, &options.bindings) {
        let plan_options = PlanOptions {
            memory_limit_bytes: 64 << 20,
            ..PlanOptions::default()
        };
        if let Ok(plan) = build_plan(&planned, &order, &states, &plan_options) {
            let inputs: HashMap<_, _> = roofline::exec::random_inputs(&plan, 3);
            let mut workspace = plan.workspace();
            if plan.run(&mut workspace, &inputs, None).is_ok() {
                tally.ran += 1;
            }
        }
    }
    // The advisor's float passes and the export of what they produce.
    if let Ok((_, rewritten)) =
        advisor::advise(graph, "fuzz", &device, &options, &AdviseOptions::default())
    {
        let _ = export::to_model(&rewritten);
        tally.advised += 1;
    }
}

#[test]
fn mutated_models_never_panic_in_analysis_execution_or_advice() {
    let cases: usize = std::env::var("ROOFLINE_FUZZ_EXEC_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let seeds = [cnn_seed(), attention_seed()];
    if let Ok(dir) = std::env::var("ROOFLINE_FUZZ_DUMP_SEEDS") {
        for seed in &seeds {
            let name = &seed.graph.as_ref().unwrap().name;
            std::fs::write(format!("{dir}/{name}.onnx"), seed.encode_to_vec()).unwrap();
        }
    }
    // The seeds themselves must run: otherwise the fuzzer only explores refusals.
    for seed in &seeds {
        let mut tally = Tally::default();
        exercise(seed, &mut tally);
        assert_eq!(
            (tally.ran, tally.advised),
            (1, 1),
            "seed {:?} does not run",
            seed.graph.as_ref().map(|g| &g.name)
        );
    }
    let collect = std::env::var("ROOFLINE_FUZZ_COLLECT").ok();
    let mut sites: std::collections::BTreeMap<String, usize> = Default::default();
    if collect.is_some() {
        std::panic::set_hook(Box::new(|info| {
            let site = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = format!("{site} {message}"));
        }));
    }
    let mut rng = SplitMix(0xf022);
    let mut tally = Tally::default();
    let start = std::time::Instant::now();
    for _ in 0..cases {
        let mut model = rng.pick(&seeds).clone();
        for _ in 0..1 + rng.below(3) {
            mutate(&mut model, &mut rng);
        }
        match &collect {
            None => exercise(&model, &mut tally),
            Some(dir) => {
                // Triage mode: keep going past panics, one sample model per panic site.
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    exercise(&model, &mut tally)
                }));
                if outcome.is_err() {
                    let site = LAST_PANIC.with(|p| p.borrow().clone());
                    let seen = sites.len();
                    let count = sites.entry(site.clone()).or_insert(0usize);
                    if *count == 0 {
                        let file = format!("{dir}/panic{seen}.onnx");
                        std::fs::write(&file, model.encode_to_vec()).unwrap();
                        eprintln!("{site} -> {file}");
                    }
                    *count += 1;
                }
            }
        }
    }
    if collect.is_some() {
        eprintln!("{} panic sites: {sites:#?}", sites.len());
    }
    eprintln!(
        "structured fuzz: {cases} mutated models in {:.1} s, no panic: {} refused at import, {} at analysis, {} ran, {} advised",
        start.elapsed().as_secs_f64(),
        tally.refused_at_import,
        tally.refused_at_analysis,
        tally.ran,
        tally.advised
    );
    // A fuzzer whose every case is refused at the door tests nothing past it. Most mutations
    // make a model the schema validation refuses (as onnx's checker would); a few percent
    // must still reach the kernels.
    assert!(
        tally.ran > cases / 40,
        "only {} of {cases} mutated models ran",
        tally.ran
    );
}
