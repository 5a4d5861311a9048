//! Analysis speed: the whole `analyze` path (mmap, decode, import, inference, cost, roofline) on
//! a 102 MB ResNet-50 file with real random weights, and the same model built in memory.
//! Compare with onnx-tool on the same file (see README: Speed).

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion};
use roofline::analysis::{self, import, AnalyzeOptions, Bindings};
use roofline::builtin::{self, WeightFill};
use roofline::device::find_device;

fn resnet50_file() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-resnet50.onnx");
    if !path.exists() {
        let proto = builtin::find("resnet50")
            .unwrap()
            .build(WeightFill::Random(7));
        std::fs::write(&path, prost::Message::encode_to_vec(&proto)).unwrap();
    }
    path
}

fn bench_analyze(c: &mut Criterion) {
    let device = find_device("rtx2080ti").unwrap().to_profile();
    let options = AnalyzeOptions {
        bindings: Bindings {
            inputs: Vec::new(),
            batch: Some(1),
            dims: Vec::new(),
        },
        ..AnalyzeOptions::default()
    };
    let path = resnet50_file();
    c.bench_function("analyze resnet50.onnx (102 MB file)", |b| {
        b.iter(|| analysis::analyze_file(&path, &device, &options).unwrap())
    });
    let proto = builtin::find("resnet50").unwrap().build(WeightFill::Zeros);
    c.bench_function("import + analyze resnet50 (in memory)", |b| {
        b.iter(|| {
            let graph = import::import_model(&proto, Path::new("."), Path::new("mem")).unwrap();
            analysis::analyze_graph(graph, "mem", &device, &options).unwrap()
        })
    });
}

criterion_group!(benches, bench_analyze);
criterion_main!(benches);
