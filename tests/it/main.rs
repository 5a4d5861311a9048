//! Integration tests, one binary with modules by theme.

// The binary's allocator, so every integration test also exercises it.
#[global_allocator]
static HEAP: roofline::heap::HugePageHeap = roofline::heap::HugePageHeap;

mod advisor;
mod bad_input;
mod builtin_models;
mod checker_agreement;
mod cli;
mod cli_output;
mod common;
mod compress;
mod conformance;
mod corpus;
mod cost_model;
mod exec_vs_ort;
mod export_checker;
mod fuzz_exec;
mod fuzz_loader;
mod generated;
mod golden;
mod hostile;
mod layers;
mod llm;
mod model_loader;
mod quant;
mod winograd;
