//! Bounded property test of the loader: random byte strings and mutated real models go through
//! decode → import → analyze, which may fail but must never panic. Runs a fixed number of cases
//! from a fixed seed (repeatable); `ROOFLINE_FUZZ_CASES` raises the count for longer runs.

use std::path::Path;

use bytes::Bytes;
use prost::Message;
use roofline::analysis::{self, import, AnalyzeOptions, Bindings};
use roofline::builtin::{self, WeightFill};
use roofline::device::find_device;

use super::fuzz_exec::SplitMix;

fn try_analyze(bytes: Vec<u8>) {
    let path = Path::new("fuzz.onnx");
    let Ok(model) = import::decode_model(Bytes::from(bytes), path) else {
        return;
    };
    let Ok(graph) = import::import_model(&model, Path::new("/nonexistent-fuzz-dir"), path) else {
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
    let _ = analysis::analyze_graph(graph, "fuzz", &device, &options);
}

/// Replaces large initializers by ConstantOfShape nodes (as the onnx package's light models
/// do), so seeds keep their structure but mutate in microseconds.
fn lighten(model: &mut roofline::analysis::onnx_proto::ModelProto) {
    use roofline::analysis::onnx_proto::{AttributeProto, NodeProto, TensorProto};
    let graph = model.graph.as_mut().unwrap();
    let mut generators = Vec::new();
    for init in &mut graph.initializer {
        if init.raw_data.len() > 64 {
            let shape_name = format!("{}_shape", init.name);
            generators.push(NodeProto {
                input: vec![shape_name.clone()],
                output: vec![init.name.clone()],
                op_type: "ConstantOfShape".into(),
                attribute: vec![AttributeProto {
                    name: "value".into(),
                    r#type: 4,
                    t: Some(TensorProto {
                        dims: vec![1],
                        data_type: 1,
                        float_data: vec![0.01],
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            });
            let dims = init.dims.clone();
            *init = TensorProto {
                dims: vec![dims.len() as i64],
                data_type: 7,
                name: shape_name,
                int64_data: dims,
                ..Default::default()
            };
        }
    }
    generators.append(&mut graph.node);
    graph.node = generators;
}

fn mutate(seed: &[u8], rng: &mut SplitMix) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        match rng.below(5) {
            0 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
            1 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes[i] = rng.next() as u8;
            }
            2 => bytes.truncate(rng.below(bytes.len() + 1)),
            3 if bytes.len() > 8 => {
                // Duplicate a slice (protobuf fields repeated or length prefixes shifted).
                let start = rng.below(bytes.len() - 4);
                let len = 1 + rng.below((bytes.len() - start).min(64));
                let chunk = bytes[start..start + len].to_vec();
                let at = rng.below(bytes.len());
                bytes.splice(at..at, chunk);
            }
            _ => {
                // Interesting varints: huge dims and lengths.
                let i = rng.below(bytes.len() + 1);
                bytes.splice(
                    i..i,
                    [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                );
            }
        }
    }
    bytes
}

#[test]
fn loader_never_panics_on_random_or_mutated_input() {
    let cases: usize = std::env::var("ROOFLINE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let mut rng = SplitMix(0x5eed);
    let seeds: Vec<Vec<u8>> = ["tinycnn", "mobilenetv2", "bert-base"]
        .iter()
        .map(|name| {
            let mut model = builtin::find(name).unwrap().build(WeightFill::Zeros);
            lighten(&mut model);
            model.encode_to_vec()
        })
        .collect();
    let mut ran = 0;
    for case in 0..cases {
        let bytes = if case % 10 == 0 {
            (0..rng.below(256)).map(|_| rng.next() as u8).collect()
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(seed, &mut rng)
        };
        try_analyze(bytes);
        ran += 1;
    }
    eprintln!("loader property test: {ran} inputs, no panic");
}
