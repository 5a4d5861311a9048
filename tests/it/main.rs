//! Integration tests, one binary with modules by theme.

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
