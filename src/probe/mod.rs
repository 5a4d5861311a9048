//! Hardware probe: measures this machine's compute and bandwidth ceilings with microbenchmark
//! kernels and describes them as a `DeviceProfile`. Knows nothing about ONNX or graphs.

mod record;

pub use record::ProbeRecord;
